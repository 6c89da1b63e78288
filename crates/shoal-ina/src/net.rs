//! Socket options std does not expose.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Asks for large kernel buffers so bursts of a full window are not dropped
/// by the host before congestion control reacts. Best effort: the kernel
/// clamps to its limits and failures are harmless.
pub fn set_buffers(sock: &UdpSocket, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: valid fd, pointer to a live c_int of the size given.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// Waits until the socket is readable or `timeout` passes.
pub fn wait_readable(sock: &UdpSocket, timeout: Duration) {
    let mut fds = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    unsafe {
        libc::poll(&mut fds, 1, ms);
    }
}
