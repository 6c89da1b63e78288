//! The data plane's socket layer, shared by the switch and the client:
//! batched datagram I/O (`recvmmsg`/`sendmmsg` on Linux, a loop of
//! `recv_from`/`send_to` elsewhere) and the socket options std does not expose.
//!
//! A [`Batch`] is either a receive batch (fixed buffers, filled by one
//! system call) or a send batch (an arena of queued datagrams, written by one
//! system call). One datagram per system call was the data path's main cost.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Kernel memory one queued datagram costs beyond its payload (skb and
/// allocator overhead; measured about 830 bytes on Linux loopback).
pub const DATAGRAM_OVERHEAD: usize = 1024;

/// Largest datagram a socket can receive (UDP payload limit, rounded up).
pub const MAX_DATAGRAM: usize = 65536;

/// Bytes a send batch queues before it counts as full (besides its count).
const MAX_QUEUED_BYTES: usize = 4 << 20;

/// Datagrams of `payload` bytes that a socket buffer of `bytes` (as reported
/// by the kernel) holds before it drops.
pub fn buffer_packets(bytes: usize, payload: usize) -> usize {
    bytes / (payload + DATAGRAM_OVERHEAD)
}

/// Kernel socket buffer sizes in effect, as `getsockopt` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffers {
    pub recv: usize,
    pub send: usize,
}

// SO_{RCV,SND}BUFFORCE (privileged: exceed net.core.{r,w}mem_max) with the
// asm-generic numbers; libc does not export them for every Linux target.
const ASM_GENERIC_SOCKOPTS: bool = cfg!(all(
    target_os = "linux",
    any(
        target_arch = "x86",
        target_arch = "x86_64",
        target_arch = "arm",
        target_arch = "aarch64",
        target_arch = "riscv64",
        target_arch = "powerpc64",
        target_arch = "s390x"
    )
));
const FORCE: [(libc::c_int, libc::c_int); 2] = if ASM_GENERIC_SOCKOPTS {
    [(libc::SO_RCVBUF, 33), (libc::SO_SNDBUF, 32)]
} else {
    [(libc::SO_RCVBUF, -1), (libc::SO_SNDBUF, -1)]
};

fn setsockopt_int(sock: &UdpSocket, opt: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: valid fd, pointer to a live c_int of the size given.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

fn getsockopt_int(sock: &UdpSocket, opt: libc::c_int) -> usize {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid fd, pointer to a live c_int and its length.
    let ok = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        ) == 0
    };
    if ok {
        v.max(0) as usize
    } else {
        0
    }
}

/// Asks for kernel buffers of `bytes` each way so that a full window of
/// every member is not dropped by the host before congestion control
/// reacts. Privileged processes get the size asked for; others are clamped
/// by the kernel (`net.core.rmem_max`/`wmem_max`). Returns what is in effect,
/// which callers use to bound their windows.
pub fn set_buffers(sock: &UdpSocket, bytes: usize) -> Buffers {
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    for (opt, force) in FORCE {
        if force < 0 || !setsockopt_int(sock, force, v) {
            setsockopt_int(sock, opt, v);
        }
    }
    Buffers {
        recv: getsockopt_int(sock, libc::SO_RCVBUF),
        send: getsockopt_int(sock, libc::SO_SNDBUF),
    }
}

fn poll_one(sock: &UdpSocket, events: libc::c_short, timeout: Duration) {
    let mut fds = libc::pollfd {
        fd: sock.as_raw_fd(),
        events,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    unsafe {
        libc::poll(&mut fds, 1, ms);
    }
}

/// Waits until the socket is readable or `timeout` passes.
pub fn wait_readable(sock: &UdpSocket, timeout: Duration) {
    poll_one(sock, libc::POLLIN, timeout);
}

/// One datagram of a batch: bytes `off..off + len` of the batch's buffer.
#[derive(Clone, Copy)]
struct Entry {
    off: usize,
    len: usize,
    addr: SocketAddr,
}

/// A batch of datagrams for one system call. See the module documentation.
///
/// On Linux, a send batch also hands each run of equal-sized datagrams for
/// one destination to the kernel as one UDP GSO message (`UDP_SEGMENT`),
/// and a receive batch turns on UDP GRO so that one buffer may return such a
/// run whole: the stack is traversed once per run instead of once per
/// datagram. Either falls back to plain datagrams where unsupported.
pub struct Batch {
    /// Most messages per receive call; most datagrams queued for sending
    /// (which also stops at `MAX_QUEUED_BYTES`).
    cap: usize,
    /// Receive batches: the buffer size of each message (0 for send batches).
    stride: usize,
    /// Receive: `cap * stride` bytes. Send: the arena, initialised up to its
    /// length and in use up to `used` (kept initialised to avoid re-zeroing).
    data: Vec<u8>,
    used: usize,
    ents: Vec<Entry>,
    /// Send batches: try segmentation offload (cleared when the kernel or
    /// the route refuses it).
    #[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
    gso: bool,
    #[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
    sys: sys::Scratch,
}

impl Default for Batch {
    /// An empty placeholder (for `std::mem::take`); holds nothing.
    fn default() -> Batch {
        Batch::sender(0)
    }
}

impl Batch {
    /// A receive batch for `sock` of up to `cap` messages, each a datagram
    /// of up to `max_len` bytes (longer ones are discarded) or, where the
    /// kernel coalesces (GRO, turned on here), a run of up to 64 KiB.
    pub fn receiver(sock: &UdpSocket, cap: usize, max_len: usize) -> Batch {
        // One spare byte: a datagram that fills its buffer was cut.
        let stride = if sys::enable_gro(sock) {
            MAX_DATAGRAM
        } else {
            max_len
        } + 1;
        Batch {
            cap,
            stride,
            data: vec![0; cap * stride],
            used: 0,
            ents: Vec::with_capacity(cap),
            gso: false,
            sys: sys::Scratch::new(cap),
        }
    }

    /// A send batch of up to `cap` datagrams.
    pub fn sender(cap: usize) -> Batch {
        Batch {
            cap,
            stride: 0,
            data: Vec::new(),
            used: 0,
            ents: Vec::with_capacity(cap),
            gso: true,
            sys: sys::Scratch::new(cap),
        }
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.ents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ents.is_empty()
    }

    /// Datagrams a send batch may still queue before it must be sent.
    pub fn room(&self) -> usize {
        if self.used >= MAX_QUEUED_BYTES {
            0
        } else {
            self.cap.saturating_sub(self.ents.len())
        }
    }

    pub fn is_full(&self) -> bool {
        self.room() == 0
    }

    /// Bytes of all datagrams held.
    pub fn bytes(&self) -> usize {
        self.ents.iter().map(|e| e.len).sum()
    }

    /// Datagram `i` and its peer address.
    pub fn get(&self, i: usize) -> (&[u8], SocketAddr) {
        let e = self.ents[i];
        (&self.data[e.off..e.off + e.len], e.addr)
    }

    pub fn clear(&mut self) {
        self.ents.clear();
        self.used = 0;
    }

    /// Receives what the socket has queued, up to `cap` messages, without
    /// blocking; replaces the batch's contents. Returns the number of
    /// messages read (0 when none was queued, and fewer than `cap` when the
    /// socket was drained); [`Batch::len`] counts the datagrams.
    pub fn recv(&mut self, sock: &UdpSocket) -> io::Result<usize> {
        self.clear();
        debug_assert!(self.stride > 0, "recv on a send batch");
        sys::recv(self, sock)
    }

    /// Queues a datagram for `to` whose `len` bytes `fill` writes. The caller
    /// flushes with [`Batch::send`] when [`Batch::is_full`].
    pub fn push_with(&mut self, len: usize, to: SocketAddr, fill: impl FnOnce(&mut [u8])) {
        debug_assert!(self.ents.len() < self.cap, "send batch over its count");
        let off = self.used;
        if self.data.len() < off + len {
            self.data.resize(off + len, 0);
        }
        fill(&mut self.data[off..off + len]);
        self.used = off + len;
        self.ents.push(Entry { off, len, addr: to });
    }

    /// Queues a copy of `pkt` for `to`.
    pub fn push(&mut self, pkt: &[u8], to: SocketAddr) {
        self.push_with(pkt.len(), to, |b| b.copy_from_slice(pkt));
    }

    /// Queues the last queued datagram once more, for `to`, sharing its bytes.
    pub fn repeat_last(&mut self, to: SocketAddr) {
        debug_assert!(self.ents.len() < self.cap, "send batch over its count");
        if let Some(&e) = self.ents.last() {
            self.ents.push(Entry { addr: to, ..e });
        }
    }

    /// Takes the last queued datagram back out (a copy of its bytes).
    pub fn pop(&mut self) -> Option<(Vec<u8>, SocketAddr)> {
        let e = self.ents.pop()?;
        let pkt = self.data[e.off..e.off + e.len].to_vec();
        if !self.ents.iter().any(|o| o.off == e.off) {
            self.used = e.off;
        }
        Some((pkt, e.addr))
    }

    /// Sends every queued datagram and empties the batch. Datagrams for one
    /// destination keep their order; those for different destinations may
    /// be reordered among themselves. A send buffer that stays full for a
    /// millisecond loses the rest, as a full switch queue would; the
    /// receivers' timeouts repair it. Returns the number of datagrams sent.
    pub fn send(&mut self, sock: &UdpSocket) -> usize {
        let sent = if self.ents.is_empty() {
            0
        } else {
            sys::send(self, sock)
        };
        self.clear();
        sent
    }
}

/// What to do after a send call failed with `err`: retry (after waiting for
/// buffer space once), or give up on the message at hand.
fn retry_send(err: &io::Error, sock: &UdpSocket, waited: &mut bool) -> bool {
    match err.kind() {
        io::ErrorKind::Interrupted => true,
        io::ErrorKind::WouldBlock if !*waited => {
            *waited = true;
            poll_one(sock, libc::POLLOUT, Duration::from_millis(1));
            true
        }
        _ => false,
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod sys {
    use std::io;
    use std::mem::{size_of, zeroed};
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
    use std::os::fd::AsRawFd;

    use super::{retry_send, Batch, Entry};

    const UDP_SEGMENT: libc::c_int = 103;
    const UDP_GRO: libc::c_int = 104;
    /// Segments per GSO message (the kernel's UDP_MAX_SEGMENTS, older value).
    const GSO_MAX_SEGMENTS: usize = 64;
    /// Bytes per GSO message: within the 64 KiB IP packet limit.
    const GSO_MAX_BYTES: usize = 65000;
    /// Messages per sendmmsg call (the kernel's UIO_MAXIOV).
    const MAX_MSGS: usize = 1024;

    /// Room for one control message of an int (aligned for cmsghdr).
    type Ctrl = [u64; 4];

    /// The kernel-facing arrays, rebuilt before each call (the batch's
    /// buffers may have moved since).
    pub struct Scratch {
        hdrs: Vec<libc::mmsghdr>,
        iovs: Vec<libc::iovec>,
        names: Vec<libc::sockaddr_storage>,
        ctrl: Vec<Ctrl>,
        /// Send: entry indices grouped by destination; per message, the
        /// first position in `order`.
        order: Vec<usize>,
        starts: Vec<usize>,
    }

    // SAFETY: the raw pointers in `hdrs`/`iovs` are only meaningful during
    // one system call, made by the batch's owner; they are rebuilt each time.
    unsafe impl Send for Scratch {}

    impl Scratch {
        pub fn new(cap: usize) -> Scratch {
            Scratch {
                // SAFETY: all-zero is a valid value of these C structs.
                hdrs: (0..cap).map(|_| unsafe { zeroed() }).collect(),
                iovs: (0..cap)
                    .map(|_| libc::iovec {
                        iov_base: std::ptr::null_mut(),
                        iov_len: 0,
                    })
                    .collect(),
                // SAFETY: as above.
                names: (0..cap).map(|_| unsafe { zeroed() }).collect(),
                ctrl: vec![[0; 4]; cap],
                order: Vec::with_capacity(cap),
                starts: Vec::with_capacity(cap),
            }
        }
    }

    fn setsockopt_udp(sock: &UdpSocket, opt: libc::c_int, v: libc::c_int) -> bool {
        // SAFETY: valid fd, pointer to a live c_int of the size given.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_UDP,
                opt,
                &v as *const libc::c_int as *const libc::c_void,
                size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    }

    /// Turns on UDP GRO (Linux 5.0+): the kernel may then return a run of
    /// datagrams of one flow as one buffer with their segment size.
    pub fn enable_gro(sock: &UdpSocket) -> bool {
        setsockopt_udp(sock, UDP_GRO, 1)
    }

    fn encode_addr(a: &SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
        match a {
            SocketAddr::V4(a) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
                let s = unsafe { &mut *(out as *mut _ as *mut libc::sockaddr_in) };
                s.sin_family = libc::AF_INET as libc::sa_family_t;
                s.sin_port = a.port().to_be();
                s.sin_addr = libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                };
                s.sin_zero = [0; 8];
                size_of::<libc::sockaddr_in>() as libc::socklen_t
            }
            SocketAddr::V6(a) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
                let s = unsafe { &mut *(out as *mut _ as *mut libc::sockaddr_in6) };
                s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                s.sin6_port = a.port().to_be();
                s.sin6_flowinfo = a.flowinfo();
                s.sin6_addr = libc::in6_addr {
                    s6_addr: a.ip().octets(),
                };
                s.sin6_scope_id = a.scope_id();
                size_of::<libc::sockaddr_in6>() as libc::socklen_t
            }
        }
    }

    fn decode_addr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
        match s.ss_family as libc::c_int {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let s = unsafe { &*(s as *const _ as *const libc::sockaddr_in) };
                let ip = Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes());
                Some(SocketAddrV4::new(ip, u16::from_be(s.sin_port)).into())
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let s = unsafe { &*(s as *const _ as *const libc::sockaddr_in6) };
                let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
                let port = u16::from_be(s.sin6_port);
                Some(SocketAddrV6::new(ip, port, s.sin6_flowinfo, s.sin6_scope_id).into())
            }
            _ => None,
        }
    }

    /// The GRO segment size of a received message, if the kernel coalesced it.
    fn gro_segment(h: &libc::msghdr) -> Option<usize> {
        // SAFETY: the kernel filled `msg_control` up to `msg_controllen`;
        // the CMSG_* walk stays inside it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                    let v = (libc::CMSG_DATA(c) as *const libc::c_int).read_unaligned();
                    return (v > 0).then_some(v as usize);
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        None
    }

    pub fn recv(b: &mut Batch, sock: &UdpSocket) -> io::Result<usize> {
        let n = b.cap;
        let base = b.data.as_mut_ptr();
        let sc = &mut b.sys;
        for i in 0..n {
            sc.iovs[i] = libc::iovec {
                // SAFETY: slot i lies inside `data` (cap * stride bytes).
                iov_base: unsafe { base.add(i * b.stride) } as *mut libc::c_void,
                iov_len: b.stride,
            };
            let h = &mut sc.hdrs[i].msg_hdr;
            h.msg_name = &mut sc.names[i] as *mut _ as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut sc.iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = sc.ctrl[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = size_of::<Ctrl>() as _;
            h.msg_flags = 0;
            sc.hdrs[i].msg_len = 0;
        }
        let got = loop {
            // SAFETY: `n` initialised headers pointing at live buffers,
            // names and control buffers of the sizes given; non-blocking.
            let r = unsafe {
                libc::recvmmsg(
                    sock.as_raw_fd(),
                    sc.hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Ok(0),
                _ => return Err(e),
            }
        };
        for i in 0..got {
            let h = &sc.hdrs[i];
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                continue;
            }
            let Some(addr) = decode_addr(&sc.names[i]) else {
                continue;
            };
            let (off, len) = (i * b.stride, h.msg_len as usize);
            let seg = gro_segment(&h.msg_hdr).unwrap_or(len).max(1);
            let mut at = 0;
            loop {
                let l = seg.min(len - at);
                b.ents.push(Entry {
                    off: off + at,
                    len: l,
                    addr,
                });
                at += l;
                if at >= len {
                    break;
                }
            }
        }
        Ok(got)
    }

    /// Orders the batch's entries by destination, each destination's
    /// datagrams in their order. Few destinations (a job's members) are
    /// bucketed in a pass each; many fall back to a stable sort.
    fn group(b: &mut Batch) {
        const FEW: usize = 16;
        let sc = &mut b.sys;
        let ents = &b.ents;
        sc.order.clear();
        let mut dests: [Option<SocketAddr>; FEW] = [None; FEW];
        let mut nd = 0;
        for e in ents {
            if dests[..nd].iter().all(|d| *d != Some(e.addr)) {
                if nd == FEW {
                    sc.order.extend(0..ents.len());
                    sc.order.sort_by(|&x, &y| ents[x].addr.cmp(&ents[y].addr));
                    return;
                }
                dests[nd] = Some(e.addr);
                nd += 1;
            }
        }
        if nd == 1 {
            sc.order.extend(0..ents.len());
            return;
        }
        for d in &dests[..nd] {
            let d = d.expect("first nd are set");
            sc.order
                .extend((0..ents.len()).filter(|&i| ents[i].addr == d));
        }
    }

    /// Builds messages from position `from` of the order: with `gso`, each
    /// run of equal-sized datagrams for one destination (the last may be
    /// shorter) becomes one segmented message. Returns the message count.
    fn build(b: &mut Batch, from: usize, gso: bool) -> usize {
        let base = b.data.as_mut_ptr();
        let sc = &mut b.sys;
        sc.starts.clear();
        let mut p = from;
        while p < sc.order.len() {
            let m = sc.starts.len();
            let e0 = b.ents[sc.order[p]];
            let mut q = p + 1;
            if gso {
                let mut total = e0.len;
                while q < sc.order.len() && q - p < GSO_MAX_SEGMENTS {
                    let e = b.ents[sc.order[q]];
                    let last = b.ents[sc.order[q - 1]].len < e0.len;
                    if last || e.addr != e0.addr || e.len > e0.len || total + e.len > GSO_MAX_BYTES
                    {
                        break;
                    }
                    total += e.len;
                    q += 1;
                }
            }
            for k in p..q {
                let e = b.ents[sc.order[k]];
                sc.iovs[k] = libc::iovec {
                    // SAFETY: entries lie inside the arena's initialised length.
                    iov_base: unsafe { base.add(e.off) } as *mut libc::c_void,
                    iov_len: e.len,
                };
            }
            let namelen = encode_addr(&e0.addr, &mut sc.names[m]);
            let h = &mut sc.hdrs[m].msg_hdr;
            h.msg_name = &mut sc.names[m] as *mut _ as *mut libc::c_void;
            h.msg_namelen = namelen;
            h.msg_iov = &mut sc.iovs[p];
            h.msg_iovlen = q - p;
            h.msg_flags = 0;
            if q - p > 1 {
                let c = sc.ctrl[m].as_mut_ptr() as *mut libc::cmsghdr;
                // SAFETY: `ctrl[m]` is 32 aligned bytes, room for a cmsghdr
                // and a u16 (CMSG_SPACE(2) = 24 on 64-bit, 16 on 32-bit).
                unsafe {
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    (libc::CMSG_DATA(c) as *mut u16).write_unaligned(e0.len as u16);
                }
                h.msg_control = c as *mut libc::c_void;
                // SAFETY: pure arithmetic.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as _;
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
            sc.starts.push(p);
            p = q;
        }
        sc.starts.len()
    }

    pub fn send(b: &mut Batch, sock: &UdpSocket) -> usize {
        group(b);
        let mut msgs = build(b, 0, b.gso);
        let (mut m, mut sent, mut waited) = (0, 0, false);
        while m < msgs {
            let k = (msgs - m).min(MAX_MSGS);
            let sc = &mut b.sys;
            // SAFETY: headers m..m+k are initialised and point at live
            // buffers, names and control messages.
            let r = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    sc.hdrs[m..].as_mut_ptr(),
                    k as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                for i in m..m + r as usize {
                    sent += sc.hdrs[i].msg_hdr.msg_iovlen;
                }
                m += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            if retry_send(&e, sock, &mut waited) {
                continue;
            }
            if e.kind() == io::ErrorKind::WouldBlock {
                break;
            }
            if sc.hdrs[m].msg_hdr.msg_iovlen > 1 {
                // Segmentation offload refused (old kernel, a route whose
                // MTU is under the segment size, no checksum offload):
                // send plain datagrams from here on.
                b.gso = false;
                let from = sc.starts[m];
                msgs = build(b, from, false);
                m = 0;
            } else {
                m += 1; // this datagram cannot be sent; go on with the rest
            }
        }
        sent
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod sys {
    use std::io;
    use std::net::UdpSocket;

    use super::{retry_send, Batch, Entry};

    pub struct Scratch;

    impl Scratch {
        pub fn new(_: usize) -> Scratch {
            Scratch
        }
    }

    pub fn enable_gro(_: &UdpSocket) -> bool {
        false
    }

    /// Without a per-call non-blocking flag, the socket is made non-blocking.
    pub fn recv(b: &mut Batch, sock: &UdpSocket) -> io::Result<usize> {
        sock.set_nonblocking(true)?;
        let mut got = 0;
        for i in 0..b.cap {
            let off = i * b.stride;
            match sock.recv_from(&mut b.data[off..off + b.stride]) {
                Ok((len, addr)) => {
                    got += 1;
                    // A datagram filling the buffer (spare byte included) was cut.
                    if len < b.stride {
                        b.ents.push(Entry { off, len, addr });
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if i == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(got)
    }

    pub fn send(b: &mut Batch, sock: &UdpSocket) -> usize {
        let (mut sent, mut waited, mut i) = (0, false, 0);
        while i < b.ents.len() {
            let e = b.ents[i];
            match sock.send_to(&b.data[e.off..e.off + e.len], e.addr) {
                Ok(_) => {
                    sent += 1;
                    i += 1;
                }
                Err(err) if retry_send(&err, sock, &mut waited) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => i += 1,
            }
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Receives until `want` datagrams came or 5 s passed.
    fn recv_all(rx: &mut Batch, sock: &UdpSocket, want: usize) -> Vec<(Vec<u8>, SocketAddr)> {
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while got.len() < want && t.elapsed() < Duration::from_secs(5) {
            wait_readable(sock, Duration::from_millis(10));
            rx.recv(sock).unwrap();
            got.extend((0..rx.len()).map(|i| (rx.get(i).0.to_vec(), rx.get(i).1)));
        }
        got
    }

    #[test]
    fn batches_keep_order_per_destination_and_share_bytes() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (b, c) = (
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            UdpSocket::bind("127.0.0.1:0").unwrap(),
        );
        let (tb, tc) = (b.local_addr().unwrap(), c.local_addr().unwrap());
        let mut tx = Batch::sender(256);
        // Interleaved destinations, equal sizes with a shorter tail (one
        // GSO run per destination where supported), shared bytes, and a
        // datagram taken back out.
        for i in 0..100u8 {
            tx.push(&[i; 100], tb);
            tx.repeat_last(tc);
        }
        tx.push(&[200; 7], tb);
        tx.push_with(5, tc, |p| p.copy_from_slice(b"three"));
        tx.push(b"held", tb);
        assert_eq!(tx.pop(), Some((b"held".to_vec(), tb)));
        assert_eq!(tx.send(&a), 202);
        assert!(tx.is_empty());
        let from = a.local_addr().unwrap();
        for (sock, tail) in [(&b, vec![200u8; 7]), (&c, b"three".to_vec())] {
            let mut rx = Batch::receiver(sock, 8, 128);
            let got = recv_all(&mut rx, sock, 101);
            let mut want: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 100]).collect();
            want.push(tail);
            assert_eq!(got.iter().map(|g| g.0.clone()).collect::<Vec<_>>(), want);
            assert!(got.iter().all(|g| g.1 == from));
        }
    }

    #[test]
    fn oversized_datagrams_are_discarded_without_gro() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = b.local_addr().unwrap();
        let mut rx = Batch::receiver(&b, 4, 16);
        a.send_to(&[7u8; 40], to).unwrap();
        a.send_to(&[8u8; 4], to).unwrap();
        let got: Vec<Vec<u8>> = recv_all(&mut rx, &b, 2).into_iter().map(|g| g.0).collect();
        if rx.stride == 17 {
            assert_eq!(got, vec![vec![8u8; 4]]);
        } else {
            assert_eq!(got, vec![vec![7u8; 40], vec![8u8; 4]]);
        }
    }

    /// Where the kernel refuses segmentation offload (here: a socket
    /// without UDP checksums), the batch falls back to plain datagrams.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn refused_segmentation_offload_falls_back() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        const SO_NO_CHECK: libc::c_int = 11;
        assert!(setsockopt_int(&a, SO_NO_CHECK, 1));
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = b.local_addr().unwrap();
        let mut tx = Batch::sender(64);
        for i in 0..20u8 {
            tx.push(&[i; 300], to);
        }
        assert_eq!(tx.send(&a), 20);
        assert!(!tx.gso);
        let mut rx = Batch::receiver(&b, 64, 512);
        let got: Vec<Vec<u8>> = recv_all(&mut rx, &b, 20).into_iter().map(|g| g.0).collect();
        assert_eq!(got, (0..20u8).map(|i| vec![i; 300]).collect::<Vec<_>>());
    }
}
