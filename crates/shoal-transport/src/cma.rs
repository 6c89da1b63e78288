//! Linux cross-memory attach: reading another process's memory with
//! `process_vm_readv`, the single copy of shm's rendezvous path.
//!
//! The kernel allows it when this process may ptrace the other one
//! (same user, and Yama's `ptrace_scope` permitting), so the shm transport
//! probes every peer once at connect time and falls back to its rings where
//! it is refused.

use std::io;

/// Reads `dst.len()` bytes at `addr` in process `pid` into `dst`.
///
/// Returns how many bytes were read: fewer than asked only when the remote
/// range stops being readable part way (the next call then reports why).
/// `ESRCH` means the process is gone (or a zombie); `EPERM` that reading it
/// is not permitted; a bad address (`EFAULT`: the remote range is not
/// mapped) is reported as such, see [`bad_address`].
pub(crate) fn read(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: dst.len(),
    };
    loop {
        // SAFETY: `local` describes memory we own exclusively; the kernel
        // checks the remote range and the permission.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EFAULT) {
            return Err(bad_address("sender's", addr, dst.len()));
        }
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads all of `dst` from `addr` in `pid`; a short read is a bad address.
pub(crate) fn read_exact(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < dst.len() {
        let at = addr + done as u64;
        match read(pid, at, &mut dst[done..])? {
            0 => return Err(bad_address("sender's", at, dst.len() - done)),
            n => done += n,
        }
    }
    Ok(())
}

/// Writes all of `src` to `addr` in process `pid` (`process_vm_writev`):
/// the sender's half of a split rendezvous message, written into its
/// receiver's buffer. Errors as [`read`]'s.
pub(crate) fn write_all(pid: i32, addr: u64, src: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < src.len() {
        let at = addr + done as u64;
        let local = libc::iovec {
            iov_base: src[done..].as_ptr() as *mut libc::c_void,
            iov_len: src.len() - done,
        };
        let remote = libc::iovec {
            iov_base: at as usize as *mut libc::c_void,
            iov_len: src.len() - done,
        };
        // SAFETY: `local` describes memory we own and only read; the kernel
        // checks the remote range and the permission.
        let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        match n {
            0 => return Err(bad_address("receiver's", at, src.len() - done)),
            n if n > 0 => done += n as usize,
            _ => {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EFAULT) => {
                        return Err(bad_address("receiver's", at, src.len() - done))
                    }
                    Some(libc::EINTR) => {}
                    _ => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// `EFAULT` in words. The peer is alive (a dead one is `ESRCH`): the memory
/// it offered is not mapped, because its owner freed or unmapped the buffer
/// while the message was in flight, or the address was never valid. Saying
/// so keeps it from being taken for a dead rank.
fn bad_address(whose: &str, addr: u64, len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "bad address: the {whose} buffer at {addr:#x} ({len} bytes) was freed or is not mapped (EFAULT)"
        ),
    )
}

/// Copies `src` into `dst` the way a peer's memory is read, through
/// `process_vm_readv` on this process itself: the pinning and the copy
/// that an in-place read costs, timed by the core's calibration.
pub fn read_own(src: &[u8], dst: &mut [u8]) -> io::Result<()> {
    let pid = i32::try_from(std::process::id()).map_err(io::Error::other)?;
    let n = src.len().min(dst.len());
    read_exact(pid, src.as_ptr() as u64, &mut dst[..n])
}

/// Whether `pid`'s memory at `addr` can be read and holds `expect`.
pub(crate) fn probe(pid: i32, addr: u64, expect: &[u8]) -> bool {
    let mut got = vec![0u8; expect.len()];
    read_exact(pid, addr, &mut got).is_ok() && got == expect
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory() {
        let src: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let pid = std::process::id() as i32;
        read_exact(pid, src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(dst, src);
        assert!(probe(pid, src.as_ptr() as u64, &src[..64]));
        assert!(!probe(pid, src.as_ptr() as u64, &[7u8; 64]));
        let mut shorter = vec![0u8; 100];
        read_own(&src, &mut shorter).unwrap();
        assert_eq!(shorter, src[..100]);
    }

    #[test]
    fn writes_own_memory() {
        let src: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let pid = std::process::id() as i32;
        write_all(pid, dst.as_mut_ptr() as u64, &src).unwrap();
        assert_eq!(dst, src);
        let e = write_all(pid, 8, &src[..8]).unwrap_err();
        assert!(e.to_string().starts_with("bad address"), "{e}");
    }

    #[test]
    fn errors() {
        let mut dst = [0u8; 8];
        let pid = std::process::id() as i32;
        // An unmapped address: named as such, not as a dead process.
        let e = read_exact(pid, 8, &mut dst).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("bad address") && msg.contains("freed or is not mapped"),
            "{msg}"
        );
        // A pid that cannot exist (above pid_max's limit).
        let e = read_exact(i32::MAX, 4096, &mut dst).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
        assert!(!probe(i32::MAX, 4096, &[0u8; 8]));
    }
}
