//! Reading the small files a user names (a tuning table, a secret file):
//! regular files only, and only up to a limit. Read naively, `/dev/zero`
//! grows a buffer until the OOM killer takes the rank, and a FIFO blocks it
//! forever in `open`.

use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The text of `path`, a regular file of at most `limit` bytes, as UTF-8.
/// Errors say what is wrong without naming the file (callers name it with
/// the setting that gave it).
pub fn read_text(path: &Path, limit: u64) -> io::Result<String> {
    // Checked before opening: opening a FIFO waits for a writer.
    check(&fs::metadata(path)?, limit)?;
    // O_NONBLOCK: a FIFO put in the file's place since cannot block the
    // open either (regular files ignore the flag).
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    check(&file.metadata()?, limit)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64, limit)); // it grew meanwhile
    }
    String::from_utf8(bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

fn check(meta: &fs::Metadata, limit: u64) -> io::Result<()> {
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a special file"
        };
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("it is {what}, not a regular file"),
        ));
    }
    if meta.len() > limit {
        return Err(too_large(meta.len(), limit));
    }
    Ok(())
}

fn too_large(size: u64, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("it is {size} bytes, more than the {limit} allowed"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("shoal-small-file-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    fn refused(path: &Path, limit: u64) -> String {
        read_text(path, limit).unwrap_err().to_string()
    }

    #[test]
    fn reads_a_small_regular_file() {
        let path = scratch("ok");
        fs::write(&path, "hello\n").unwrap();
        assert_eq!(read_text(&path, 6).unwrap(), "hello\n");
    }

    #[test]
    fn refuses_devices_fifos_directories_and_large_files() {
        assert!(refused(Path::new("/dev/zero"), 1 << 20).contains("a character device"));
        let fifo = scratch("fifo");
        let _ = fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: c is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(refused(&fifo, 1 << 20).contains("a FIFO"));
        assert!(refused(&std::env::temp_dir(), 1 << 20).contains("a directory"));
        let big = scratch("big");
        fs::write(&big, vec![b'x'; 11]).unwrap();
        assert!(refused(&big, 10).contains("11 bytes, more than the 10 allowed"));
        let binary = scratch("binary");
        fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        assert!(refused(&binary, 10).contains("not UTF-8"));
    }
}
