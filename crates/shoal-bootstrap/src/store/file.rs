//! A store in a directory every rank can see (a shared NFS/Lustre mount, or
//! `/tmp` for one host). It needs no open port; file permissions keep other
//! users out, so the directory is created private (0700), every file in it
//! is written 0600, and a directory that other users may write is refused
//! (they could plant keys).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::KvStore;

use super::{deadline_after, key_timeout, parse_counter, with_context};

/// A store in a directory: one file per key, written atomically (temp file +
/// rename), so readers never see a partial value. `get` polls with backoff;
/// `add` serialises through an `flock` on a lock file, which also works
/// between processes.
pub struct FileStore {
    dir: PathBuf,
    timeout: Duration,
}

/// Name of the lock file; escaped key names never contain '.', so no key
/// maps to it (nor to a temp file).
const LOCK_FILE: &str = ".lock";

/// Distinguishes temp files of concurrent writers in one process.
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Mode of every file the store writes.
const FILE_MODE: u32 = 0o600;

impl FileStore {
    /// Uses `dir`, creating it (mode 0700) if needed; `timeout` bounds every `get`.
    pub fn new(dir: impl AsRef<Path>, timeout: Duration) -> io::Result<FileStore> {
        let dir = dir.as_ref().to_path_buf();
        let context = |e| with_context(e, format!("file store {}", dir.display()));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(context)?;
        check_private(&dir, &fs::metadata(&dir).map_err(context)?)?;
        Ok(FileStore { dir, timeout })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(escape_key(key))
    }

    fn context(&self, e: io::Error, op: &str, key: &str) -> io::Error {
        with_context(
            e,
            format!("file store {}: {op} '{key}'", self.dir.display()),
        )
    }

    /// The value of `key`, or `None` if it does not exist yet.
    fn read(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        match fs::read(self.path(key)) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.context(e, "get", key)),
        }
    }

    /// Takes the store-wide lock; released when the returned file is closed.
    fn lock_exclusive(&self) -> io::Result<File> {
        let path = self.dir.join(LOCK_FILE);
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(FILE_MODE)
            .open(&path)
            .map_err(|e| with_context(e, format!("file store lock {}", path.display())))?;
        // SAFETY: flock on a valid, open descriptor.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = io::Error::last_os_error();
            return Err(with_context(
                e,
                format!("file store lock {}", path.display()),
            ));
        }
        Ok(f)
    }
}

/// Refuses a directory that another user owns or that group or others may
/// write: whoever can write it can plant or replace keys.
fn check_private(dir: &Path, meta: &fs::Metadata) -> io::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let mode = meta.permissions().mode() & 0o7777;
    let problem = if !meta.is_dir() {
        "is not a directory".to_string()
    } else if meta.uid() != uid {
        format!("belongs to uid {}, not to this user ({uid})", meta.uid())
    } else if mode & 0o022 != 0 {
        format!("is writable by other users (mode {mode:o}), who could plant keys")
    } else {
        return Ok(());
    };
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "file store {}: the directory {problem}; use a directory of your own that only you \
             can write (`mkdir -m 700 DIR`)",
            dir.display()
        ),
    ))
}

impl KvStore for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(format!(
            ".tmp.{}.{}",
            std::process::id(),
            TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let write = || -> io::Result<()> {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(&tmp)?;
            let mut w = BufWriter::new(file);
            w.write_all(value)?;
            w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            fs::rename(&tmp, self.path(key))
        };
        write().map_err(|e| {
            let _ = fs::remove_file(&tmp);
            self.context(e, "set", key)
        })
    }

    fn get(&self, key: &str) -> io::Result<Vec<u8>> {
        let deadline = deadline_after(self.timeout);
        let mut backoff = Duration::from_millis(1);
        loop {
            if let Some(v) = self.read(key)? {
                return Ok(v);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let name = format!("file store {}", self.dir.display());
                return Err(key_timeout(&name, key, self.timeout));
            }
            thread::sleep(backoff.min(left));
            backoff = (backoff * 2).min(Duration::from_millis(50));
        }
    }

    fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        let _guard = self.lock_exclusive()?;
        let current = self.read(key)?;
        let new = parse_counter(key, current.as_deref())
            .map_err(|e| self.context(e, "add", key))?
            .wrapping_add(delta);
        self.set(key, new.to_string().as_bytes())?;
        Ok(new)
    }

    fn check(&self, keys: &[&str]) -> io::Result<bool> {
        Ok(keys.iter().all(|k| self.path(k).exists()))
    }

    fn delete(&self, key: &str) -> io::Result<bool> {
        match fs::remove_file(self.path(key)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.context(e, "delete", key)),
        }
    }
}

/// Maps a key to a file name: ASCII letters, digits, '-' and '_' stay, every
/// other byte becomes `%XX`. Injective, and never yields '.', '/' or "".
fn escape_key(key: &str) -> String {
    if key.is_empty() {
        return "%".to_string();
    }
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::temp_dir;

    #[test]
    fn escaped_keys_are_distinct_file_names() {
        let keys = ["a/b", "a%2Fb", "a.b", ".lock", "", "%", "a b"];
        let names: std::collections::HashSet<_> = keys.iter().map(|k| escape_key(k)).collect();
        assert_eq!(names.len(), keys.len());
        assert!(names
            .iter()
            .all(|n| !n.contains('.') && !n.contains('/') && !n.is_empty()));
    }

    #[test]
    fn directory_and_files_are_private() {
        let parent = temp_dir("private");
        let dir = parent.join("a/b");
        let s = FileStore::new(&dir, Duration::from_secs(1)).unwrap();
        s.set("k", b"v").unwrap();
        s.add("n", 1).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&dir), mode(&parent.join("a"))), (0o700, 0o700));
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
        fs::remove_dir_all(parent).unwrap();
    }

    #[test]
    fn a_directory_others_may_write_is_refused() {
        let dir = temp_dir("shared");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let e = FileStore::new(&dir, Duration::from_secs(1)).err().unwrap();
        let msg = e.to_string();
        assert!(
            msg.contains("writable by other users") && msg.contains("777"),
            "{msg}"
        );
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(FileStore::new(&dir, Duration::from_secs(1)).is_ok());
        fs::remove_dir_all(dir).unwrap();
    }
}
