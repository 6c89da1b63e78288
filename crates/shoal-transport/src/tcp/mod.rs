//! TCP transport: one connection per pair of ranks.
//!
//! The higher rank dials the lower one (whose `ip:port` it reads from the
//! store); both prove that they hold the job's transport key before the
//! connection is used, the dialer first ([`handshake`], run on sockets by
//! [`connect`]). Each connection
//! has a writer thread fed by a queue, so `isend` never blocks (small sends
//! on an idle connection are written by the caller), and a read side
//! ([`reader`]) that parses frames and reads payloads straight into the
//! posted receive's buffer (or through a staging buffer into its sink),
//! falling back to the unexpected queue. The read side is pumped by the
//! connection's reader thread and by the waiting rank's own polling. Both
//! ring a [`Doorbell`] the waiting rank sleeps on. EOF without a prior `Bye`
//! frame marks the peer dead. Sending to self is rejected: plans never do it.
//!
//! Flow control ([`crate::flow`]): a message goes eagerly while the
//! receiver has credit for it, so a receiver holds at most
//! [`TcpConfig::unexpected_bytes`] of one peer's unreceived messages. Beyond
//! that, the sender sends a `Rndv` header only and keeps the payload; once a
//! receive matches the header, the receiver asks for the payload with an
//! `Ack`, and it follows as a `Payload` frame, read straight into the
//! receive. Payloads ride the same stream as everything else, so they are
//! asked for and sent by the ranks' own threads, when they poll (a rank
//! outside shoal neither asks nor answers, as with any receive).

mod connect;
mod handshake;
mod reader;

pub use connect::congestion_in_effect;

use std::collections::HashMap;
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::auth::Key;
use crate::doorbell::{wait_on, Doorbell};
use crate::flow::DEFAULT_WINDOW;
use crate::frame::{credit, waiting, Header, Kind, RndvInfo, ACK_OK, ACK_UNWANTED, HEADER_LEN};
use crate::matching::{Matcher, Pull};
use crate::{
    Answer, Blocked, CallSig, KvStore, RecvInto, ReqId, Result, Tag, Transport, TransportError,
};
use reader::{wait_readable, ReadSide};

/// Settings of a [`TcpTransport`].
#[derive(Clone, Debug)]
pub struct TcpConfig {
    pub rank: usize,
    pub world: usize,
    /// Global ranks to connect to (this rank is ignored if listed).
    pub peers: Vec<usize>,
    /// Address to listen on and publish; must be reachable by the peers (an
    /// address, not a hostname, and not 0.0.0.0).
    pub bind_ip: IpAddr,
    /// Unique per job; prefixes store keys and is checked in the handshake.
    pub job_id: String,
    /// The job's transport key: connections whose far end cannot prove it
    /// holds this key are dropped.
    pub key: Key,
    /// Limit for setting up connections and for flushing sends on close.
    pub timeout: Duration,
    /// TCP congestion control of the connections (`None`: the system's).
    pub congestion: Option<Congestion>,
    /// Bytes of one peer's messages this rank holds before their receives
    /// are posted (the flow-control window, [`crate::flow`]).
    pub unexpected_bytes: usize,
}

/// A congestion-control algorithm for the connections, by its kernel name.
#[derive(Clone, Debug)]
pub struct Congestion {
    pub name: String,
    /// Whether the user asked for it: then an unavailable one is an error,
    /// else the connection keeps the system's algorithm.
    pub required: bool,
}

impl TcpConfig {
    pub fn new(rank: usize, world: usize, peers: Vec<usize>, job_id: &str, key: Key) -> TcpConfig {
        TcpConfig {
            rank,
            world,
            peers,
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            job_id: job_id.to_string(),
            key,
            timeout: Duration::from_secs(60),
            congestion: None,
            unexpected_bytes: DEFAULT_WINDOW,
        }
    }
}

/// State shared with the I/O threads.
struct Shared {
    matcher: Mutex<Matcher>,
    bell: Doorbell,
    /// Counts matcher changes that are progress (what `progress` reports).
    events: AtomicU32,
    /// Set when we close: our own EOFs are then expected, not peer deaths.
    closing: AtomicBool,
    /// When the rank last polled the sockets itself (ns since `epoch`).
    polled_at: AtomicU64,
    epoch: Instant,
    /// `Ack`s of our rendezvous messages (peer, cookie, status), read by
    /// the reader threads, for the rank's thread to send their payloads.
    acks: Acks,
}

/// The `Ack`s the reader threads hand to the rank's thread. Every poll asks
/// for them, and almost always there are none: the flag answers that
/// without the lock.
#[derive(Default)]
struct Acks {
    pending: AtomicBool,
    list: Mutex<Vec<(usize, RndvInfo)>>,
}

impl Acks {
    fn push(&self, peer: usize, info: RndvInfo) {
        let mut list = lock(&self.list);
        list.push((peer, info));
        self.pending.store(true, Ordering::Release);
    }

    /// Every `Ack` pushed since the last call.
    fn take(&self) -> Vec<(usize, RndvInfo)> {
        if !self.pending.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut list = lock(&self.list);
        self.pending.store(false, Ordering::Relaxed);
        std::mem::take(&mut *list)
    }
}

/// A rank that polled its sockets this recently is still polling them.
const POLLING_WITHIN: Duration = Duration::from_micros(200);
/// How long a reader thread stands by while the rank polls the sockets
/// itself: a reader woken by every packet would only take the CPU from it.
/// The rank going to sleep ends the wait early; the limit only matters when
/// the rank stops polling without sleeping (back to its own work, or blocked
/// writing to a peer that is blocked writing to it).
const STAND_BY: Duration = Duration::from_millis(2);

impl Shared {
    fn mark_polled(&self) {
        let now = self.epoch.elapsed().as_nanos() as u64;
        self.polled_at.store(now, Ordering::Relaxed);
    }

    /// Whether the rank is spinning on a call (polled lately and not asleep).
    fn rank_is_polling(&self) -> bool {
        // (the rank may mark a newer time between the two reads: saturate)
        let polled = self.polled_at.load(Ordering::Relaxed);
        let since = (self.epoch.elapsed().as_nanos() as u64).saturating_sub(polled);
        !self.bell.has_sleepers() && since < POLLING_WITHIN.as_nanos() as u64
    }

    fn lock(&self) -> MutexGuard<'_, Matcher> {
        self.matcher.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the matcher, then wakes the waiting rank.
    fn update(&self, f: impl FnOnce(&mut Matcher)) {
        f(&mut self.lock());
        self.events.fetch_add(1, Ordering::AcqRel);
        self.bell.ring();
    }

    /// Runs `f` (a peer telling what it waits for, or asking us) on the
    /// matcher and wakes the rank to answer or to fail, without counting
    /// it as progress: talk about a stalled call must not keep it alive.
    fn hear(&self, f: impl FnOnce(&mut Matcher)) {
        f(&mut self.lock());
        self.bell.ring();
    }

    fn lost(&self, peer: usize, detail: &str) {
        if !self.closing.load(Ordering::Acquire) {
            self.update(|m| m.peer_down(peer, detail));
        }
    }
}

struct SendPtr(*const u8);
// SAFETY: the isend caller keeps the memory valid until the request completes.
unsafe impl Send for SendPtr {}

enum Job {
    Data {
        id: ReqId,
        header: [u8; HEADER_LEN],
        data: SendPtr,
        len: usize,
        /// Bytes of header + payload the caller already wrote.
        sent: usize,
    },
    Control {
        header: [u8; HEADER_LEN],
        payload: Vec<u8>,
    },
}

struct Conn {
    peer: usize,
    stream: TcpStream,
    queue: Mutex<Option<Sender<Job>>>,
    write: Arc<WriteSide>,
    read: Arc<Mutex<ReadSide>>,
    /// Our rendezvous messages to this peer whose payload it has not asked
    /// for yet, by cookie (the send's request id).
    held: Mutex<HashMap<u64, Held>>,
}

/// The payload of a rendezvous message, kept until the receiver asks.
struct Held {
    header: [u8; HEADER_LEN],
    data: SendPtr,
    len: usize,
}

/// The write half of a connection, shared by the caller (small sends go out
/// directly, saving a thread hand-off per message) and the writer thread.
struct WriteSide {
    /// Held while one frame is written, so frames never interleave.
    stream: Mutex<TcpStream>,
    /// Jobs handed to the writer thread and not yet written: a direct write
    /// is only allowed when this is zero, to keep frames in order.
    queued: AtomicUsize,
}

/// The longest an abort waits for its frames to be written (a peer that
/// stopped reading must not hold the error up).
const ABORT_FLUSH: Duration = Duration::from_secs(1);

/// TCP transport; see the module docs.
pub struct TcpTransport {
    rank: usize,
    world: usize,
    shared: Arc<Shared>,
    conns: Vec<Conn>,
    /// Index into `conns` by global rank.
    index: Vec<Option<usize>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    last_seen: AtomicU32,
    /// How long `close` waits for queued sends to drain.
    close_timeout: Duration,
    /// Connections dropped during setup because they failed the handshake.
    refused: usize,
}

impl TcpTransport {
    /// Listens, publishes `ip:port`, and connects to every peer.
    pub fn connect(cfg: &TcpConfig, store: &dyn KvStore) -> Result<TcpTransport> {
        Self::connect_with_doorbell(cfg, store, Doorbell::new())
    }

    /// Like `connect`, but the I/O threads ring `bell` (shared with another
    /// transport so one sleep covers both).
    pub fn connect_with_doorbell(
        cfg: &TcpConfig,
        store: &dyn KvStore,
        bell: Doorbell,
    ) -> Result<TcpTransport> {
        let mut peers: Vec<usize> = cfg
            .peers
            .iter()
            .copied()
            .filter(|&p| p != cfg.rank)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        let connect::Connected { streams, refused } = connect::establish(cfg, store, &peers)?;
        let mut matcher = Matcher::new(cfg.rank, peers.iter().copied());
        matcher.limit_unexpected(cfg.unexpected_bytes);
        let shared = Arc::new(Shared {
            matcher: Mutex::new(matcher),
            bell,
            events: AtomicU32::new(0),
            closing: AtomicBool::new(false),
            polled_at: AtomicU64::new(0),
            epoch: Instant::now(),
            acks: Acks::default(),
        });
        let mut index = vec![None; cfg.world.max(peers.last().map_or(0, |m| m + 1))];
        let mut conns = Vec::new();
        let mut threads = Vec::new();
        for (peer, stream) in streams {
            index[peer] = Some(conns.len());
            let (tx, rx) = channel::<Job>();
            let (w, r, polled) = (
                stream.try_clone().map_err(io)?,
                stream.try_clone().map_err(io)?,
                stream.try_clone().map_err(io)?,
            );
            let write = Arc::new(WriteSide {
                stream: Mutex::new(w),
                queued: AtomicUsize::new(0),
            });
            let read = Arc::new(Mutex::new(ReadSide::new(r, peer)));
            let (sh, ws) = (shared.clone(), write.clone());
            threads.push(spawn(format!("shoal-tcp-w{peer}"), move || {
                writer_loop(&sh, peer, &ws, rx)
            })?);
            let (sh, rs) = (shared.clone(), read.clone());
            threads.push(spawn(format!("shoal-tcp-r{peer}"), move || {
                reader_loop(&sh, &rs, &polled)
            })?);
            conns.push(Conn {
                peer,
                stream,
                queue: Mutex::new(Some(tx)),
                write,
                read,
                held: Mutex::new(HashMap::new()),
            });
        }
        let last_seen = AtomicU32::new(0);

        Ok(TcpTransport {
            rank: cfg.rank,
            world: cfg.world,
            shared,
            conns,
            index,
            threads: Mutex::new(threads),
            last_seen,
            close_timeout: cfg.timeout.min(Duration::from_secs(10)),
            refused,
        })
    }

    /// How many connections to this rank's port were dropped during setup
    /// because they failed the handshake (strangers, other jobs).
    pub fn refused_connections(&self) -> usize {
        self.refused
    }

    /// The doorbell the I/O threads ring.
    pub fn doorbell(&self) -> Doorbell {
        self.shared.bell.clone()
    }

    fn conn(&self, peer: usize) -> Option<&Conn> {
        self.index
            .get(peer)
            .copied()
            .flatten()
            .map(|i| &self.conns[i])
    }

    fn enqueue(&self, peer: usize, job: Job) -> Result<()> {
        let c = self
            .conn(peer)
            .ok_or_else(|| io_err("transport is closed"))?;
        let queue = c.queue.lock().unwrap_or_else(|e| e.into_inner());
        enqueue_on(c, &queue, job)
    }

    /// Sends from the calling thread when the connection is idle, without
    /// blocking: what the socket does not take now is queued for the writer
    /// thread, in order. `None` means "not idle: queue it all".
    fn try_direct(
        &self,
        peer: usize,
        id: ReqId,
        header: &[u8; HEADER_LEN],
        data: *const u8,
        len: usize,
    ) -> Option<Direct> {
        if self.shared.closing.load(Ordering::Acquire) {
            return None;
        }
        let c = self.conn(peer)?;
        // The queue stays locked until the rest of a partial send is queued:
        // a send from another thread that finds the stream busy queues its
        // whole frame, and must not get in between.
        let queue = c.queue.lock().unwrap_or_else(|e| e.into_inner());
        let w = &c.write;
        let stream = w.stream.try_lock().ok()?;
        if w.queued.load(Ordering::Acquire) != 0 {
            return None;
        }
        // SAFETY: the isend caller keeps `data` valid until the request completes.
        let payload = unsafe { payload_of(data, len) };
        let sent = match send_nonblocking(&stream, header, payload) {
            Ok(sent) => sent,
            Err(e) => return Some(Direct::Failed(e)),
        };
        if sent == HEADER_LEN + len {
            return Some(Direct::Sent);
        }
        // Queued while the stream and the queue are still locked: nothing can overtake the rest.
        let rest = Job::Data {
            id,
            header: *header,
            data: SendPtr(data),
            len,
            sent,
        };
        Some(match enqueue_on(c, &queue, rest) {
            Ok(()) => Direct::Queued,
            Err(e) => Direct::Failed(std::io::Error::other(e.to_string())),
        })
    }

    /// Reads whatever has arrived on the connections no reader thread has
    /// in hand, from the calling thread.
    fn pump_readable(&self) {
        for c in &self.conns {
            let read = match c.read.try_lock() {
                Ok(r) => r,
                // (a panic mid-pump must not hide the connection for good)
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            let mut r = read;
            r.pump(&self.shared);
        }
    }

    /// Waits, at most `limit`, until the writer threads have written every
    /// frame queued so far. An abort is followed, as often as not, by the
    /// process's exit, which would drop the frames still queued: the peers
    /// would see the connection close without learning why.
    fn wait_until_written(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self
            .conns
            .iter()
            .any(|c| c.write.queued.load(Ordering::Acquire) > 0)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Half-closes every connection, then waits (until `deadline`) until
    /// each peer has acknowledged every byte sent to it, the readers still
    /// reading meanwhile. A socket closed with bytes unread, or that bytes
    /// reach after it closed, answers with a reset, and the reset throws
    /// away what it had not sent yet: a peer still reading our last message
    /// while it sends to us (credits, its own sends) would lose its end.
    /// Once acknowledged, the bytes sit in the peer's socket, which a reset
    /// does not empty.
    fn wait_until_delivered(&self, deadline: Instant) {
        for c in &self.conns {
            let _ = c.stream.shutdown(Shutdown::Write);
        }
        while self.conns.iter().any(|c| undelivered(&c.stream)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Flushes queued sends, says bye to every peer, and stops the threads.
    pub fn close(&self) {
        self.stop(true);
    }

    /// Drops every connection without saying bye, as a crash would (tests).
    #[doc(hidden)]
    pub fn close_without_bye(&self) {
        self.stop(false);
    }

    fn stop(&self, bye: bool) {
        // Once is enough: a second close (the drop after `close`) would wait
        // again for a peer that stopped acknowledging.
        if self.shared.closing.load(Ordering::Acquire) {
            return;
        }
        for c in &self.conns {
            let tx = c.queue.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let (Some(tx), true) = (tx, bye) {
                let _ = tx.send(Job::Control {
                    header: Header::control(Kind::Bye, 0).encode(),
                    payload: vec![],
                });
            }
        }
        // Writers exit once their queue is drained (they see it closed).
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        let (writers, readers): (Vec<_>, Vec<_>) = threads
            .into_iter()
            .partition(|t| t.thread().name().is_some_and(|n| n.contains("-w")));
        if bye {
            // A peer that stopped reading (e.g. SIGSTOPped) must not hang us:
            // give the writers a bounded time, then cut the sockets under them.
            let deadline = Instant::now() + self.close_timeout;
            while writers.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.wait_until_delivered(deadline);
        }
        self.shared.closing.store(true, Ordering::Release);
        for c in &self.conns {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        for t in writers.into_iter().chain(readers) {
            let _ = t.join();
        }
    }
}

impl Drop for TcpTransport {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whether bytes written to `s` are still waiting for the peer's
/// acknowledgement on a live connection (false when that cannot be asked:
/// then nothing is waited for). A reset connection keeps its count of
/// unacknowledged bytes, which will never fall, so its state is asked too.
fn undelivered(s: &TcpStream) -> bool {
    const TCP_CLOSE: u8 = 7; // (tcp_states.h; the first byte of struct tcp_info)
    let fd = s.as_raw_fd();
    let mut info = [0u8; 8];
    let mut len = info.len() as libc::socklen_t;
    let mut queued: libc::c_int = 0;
    // SAFETY: a valid socket; each call writes at most the buffer it is given.
    let (state, outq) = unsafe {
        (
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr().cast(),
                &mut len,
            ),
            libc::ioctl(fd, libc::TIOCOUTQ, &mut queued),
        )
    };
    state == 0 && outq == 0 && info[0] != TCP_CLOSE && queued > 0
}

/// Hands `job` to the connection's writer thread (`queue` is its locked queue).
fn enqueue_on(c: &Conn, queue: &Option<Sender<Job>>, job: Job) -> Result<()> {
    let Some(tx) = queue else {
        return Err(io_err("transport is closed"));
    };
    c.write.queued.fetch_add(1, Ordering::AcqRel);
    tx.send(job).map_err(|_| {
        c.write.queued.fetch_sub(1, Ordering::AcqRel);
        io_err("connection writer stopped")
    })
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(f).map_err(io)
}

/// Sends queued frames in order; completes each send once written.
fn writer_loop(sh: &Shared, peer: usize, w: &WriteSide, rx: std::sync::mpsc::Receiver<Job>) {
    for job in rx {
        let mut s = w.stream.lock().unwrap_or_else(|e| e.into_inner());
        write_job(sh, peer, &mut s, job);
        w.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

fn write_job(sh: &Shared, peer: usize, s: &mut TcpStream, job: Job) {
    {
        match job {
            Job::Data {
                id,
                header,
                data,
                len,
                sent,
            } => {
                // SAFETY: the isend caller keeps the buffer valid until completion.
                let payload = unsafe { payload_of(data.0, len) };
                match send_frame_from(s, &header, payload, sent) {
                    Ok(()) => sh.update(|m| m.complete(id)),
                    Err(e) => fail_send(sh, peer, id, &e),
                }
            }
            Job::Control { header, payload } => {
                let _ = send_frame_from(s, &header, &payload, 0);
            }
        }
    }
}

/// A send that could not be written fails alone. Whether its peer is gone
/// is for the connection's reader to say, once it has read what the peer
/// sent before the connection broke: a peer that closed while we still
/// wrote to it resets the connection with its last bytes to us unread.
fn fail_send(sh: &Shared, peer: usize, id: ReqId, e: &std::io::Error) {
    let died = TransportError::PeerDied {
        peer,
        detail: e.to_string(),
    };
    sh.update(|m| m.fail(id, died));
}

/// Writes header and payload from byte `from` of the two on (blocking); a
/// small payload goes in the same segment as the header.
fn send_frame_from(
    s: &mut TcpStream,
    header: &[u8],
    payload: &[u8],
    from: usize,
) -> std::io::Result<()> {
    if from == 0 && payload.len() <= 4096 {
        let mut buf = Vec::with_capacity(HEADER_LEN + payload.len());
        buf.extend_from_slice(header);
        buf.extend_from_slice(payload);
        return s.write_all(&buf);
    }
    s.write_all(&header[from.min(header.len())..])?;
    s.write_all(&payload[from.saturating_sub(header.len())..])
}

/// Writes as much of header + payload as the socket takes right now, in one
/// `sendmsg` per attempt; returns how many bytes went out.
fn send_nonblocking(s: &TcpStream, header: &[u8], payload: &[u8]) -> std::io::Result<usize> {
    let total = header.len() + payload.len();
    let mut sent = 0;
    while sent < total {
        let (h, p) = (
            &header[sent.min(header.len())..],
            &payload[sent.saturating_sub(header.len())..],
        );
        let mut iov = [
            libc::iovec {
                iov_base: h.as_ptr() as *mut libc::c_void,
                iov_len: h.len(),
            },
            libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            },
        ];
        // SAFETY: a zeroed msghdr is valid; it points at the two iovecs, which outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        // SAFETY: a valid socket and message; MSG_DONTWAIT keeps the socket's blocking mode intact.
        let n =
            unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n >= 0 {
            sent += n as usize;
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.kind() {
            ErrorKind::Interrupted => continue,
            ErrorKind::WouldBlock => break,
            _ => return Err(e),
        }
    }
    Ok(sent)
}

/// The `len` bytes at `data` (which may be null when `len` is 0).
///
/// # Safety
/// `data` must point at `len` readable bytes for the lifetime of the slice.
unsafe fn payload_of<'a>(data: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: as the caller promises.
    unsafe { std::slice::from_raw_parts(data, len) }
}

/// What a direct send did.
enum Direct {
    Sent,
    /// Partly written; the writer thread sends the rest and completes the request.
    Queued,
    Failed(std::io::Error),
}

/// Pumps the connection's read side whenever the socket has data and the
/// rank is not polling it itself, until the stream ends.
fn reader_loop(sh: &Shared, read: &Mutex<ReadSide>, polled: &TcpStream) {
    loop {
        if sh.rank_is_polling() {
            sh.bell.wait_for_sleeper(STAND_BY);
            continue;
        }
        wait_readable(polled);
        if sh.rank_is_polling() {
            continue;
        }
        let mut r = read.lock().unwrap_or_else(|e| e.into_inner());
        r.pump(sh);
        if r.closed() {
            return;
        }
    }
}

/// `setsockopt(IPPROTO_TCP, option)` with `value`'s bytes.
fn set_tcp_option(s: &TcpStream, option: libc::c_int, value: &[u8]) -> std::io::Result<()> {
    // SAFETY: a valid socket; the value's bytes and length.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            option,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Transport for TcpTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.world
    }

    unsafe fn isend(
        &self,
        peer: usize,
        tag: Tag,
        sig: CallSig,
        data: *const u8,
        len: usize,
        _call_bytes: usize,
    ) -> Result<ReqId> {
        let (id, eager) = {
            let mut m = self.shared.lock();
            let id = m.add_send(peer)?;
            (id, m.may_send_eagerly(peer, len, sig.is_collective()))
        };
        if !eager {
            self.send_rndv(peer, id, tag, sig, data, len)?;
            return Ok(id);
        }
        let header = Header::data(tag, sig, len).encode();
        match self.try_direct(peer, id, &header, data, len) {
            Some(Direct::Sent) => self.shared.update(|m| m.complete(id)),
            Some(Direct::Queued) => {}
            Some(Direct::Failed(e)) => fail_send(&self.shared, peer, id, &e),
            None => {
                let job = Job::Data {
                    id,
                    header,
                    data: SendPtr(data),
                    len,
                    sent: 0,
                };
                if let Err(e) = self.enqueue(peer, job) {
                    self.shared.lock().fail(id, e.clone());
                    return Err(e);
                }
            }
        }
        Ok(id)
    }

    unsafe fn irecv(&self, peer: usize, tag: Tag, sig: CallSig, into: RecvInto) -> Result<ReqId> {
        self.shared.lock().post_recv(peer, tag, sig, into)
    }

    fn test(&self, req: ReqId) -> Result<bool> {
        self.shared.lock().test(req)
    }

    fn probe(&self, from: &[(usize, Tag)]) -> Result<Option<usize>> {
        Ok(self.shared.lock().probe(from))
    }

    /// Reads what has arrived on connections no other thread is reading, then
    /// reports whether anything happened since the last call (here or in the
    /// I/O threads), or a peer failure.
    fn progress(&self) -> Result<bool> {
        self.shared.mark_polled();
        self.pump_readable();
        let (queries, pulls, credit_due) = {
            let mut m = self.shared.lock();
            m.health()?;
            (m.take_queries(), m.take_pulls(), m.take_credit_due())
        };
        if !queries.is_empty() {
            self.answer_queries(&queries);
        }
        for p in pulls {
            self.ask_for_payload(p);
        }
        self.send_asked_payloads();
        for (peer, bytes) in credit_due {
            let _ = self.send_control(peer, credit(bytes));
        }
        let now = self.shared.events.load(Ordering::Acquire);
        Ok(self.last_seen.swap(now, Ordering::AcqRel) != now)
    }

    fn wait(&self, timeout: Duration) -> Result<()> {
        wait_on(&self.shared.bell, timeout, || self.progress())
    }

    fn abort(&self, reason: &str) {
        self.shared.update(|m| {
            m.set_fatal(TransportError::Aborted {
                peer: self.rank,
                reason: reason.to_string(),
            })
        });
        let header = Header::control(Kind::Abort, reason.len()).encode();
        for c in &self.conns {
            let _ = self.enqueue(
                c.peer,
                Job::Control {
                    header,
                    payload: reason.as_bytes().to_vec(),
                },
            );
        }
        self.wait_until_written(ABORT_FLUSH.min(self.close_timeout));
    }

    fn finish_call(&self, comm: u32, seq: u32, sig: CallSig) -> Result<()> {
        self.shared.lock().finish_call(comm, seq, sig)
    }

    fn set_blocked(&self, b: &Blocked) {
        self.shared.lock().set_blocked(b);
        let header = waiting(Some(b));
        for &peer in b.on.iter().filter(|&&p| self.conn(p).is_some()) {
            let _ = self.send_control(peer, header);
        }
    }

    fn ask(&self, peer: usize) -> Result<()> {
        self.shared.lock().forget_answer(peer);
        self.send_control(peer, Header::control(Kind::Query, 0).encode())
    }

    fn answer(&self, peer: usize) -> Option<Answer> {
        self.shared.lock().answer(peer)
    }
}

impl TcpTransport {
    /// Sends a `Rndv` header for message `id` and holds its payload until
    /// the receiver asks for it.
    fn send_rndv(
        &self,
        peer: usize,
        id: ReqId,
        tag: Tag,
        sig: CallSig,
        data: *const u8,
        len: usize,
    ) -> Result<()> {
        let c = self
            .conn(peer)
            .ok_or_else(|| io_err("transport is closed"))?;
        let held = Held {
            header: Header::payload(tag, sig, len, id),
            data: SendPtr(data),
            len,
        };
        lock(&c.held).insert(id, held);
        let info = RndvInfo {
            word: 0,
            cookie: id,
        };
        self.send_control(peer, info.encode(&Header::rndv(tag, sig, len)))
            .inspect_err(|e| {
                lock(&c.held).remove(&id);
                self.shared.lock().fail(id, e.clone());
            })
    }

    /// A rendezvous message met its receive: the payload is to be read
    /// into `p.inc` when it comes; asks the sender for it (or tells it the
    /// receive does not want it: the lengths differ).
    fn ask_for_payload(&self, p: Pull) {
        let Some(c) = self.conn(p.peer) else {
            return;
        };
        if !self.shared.lock().may_pull(p.peer) {
            let mut m = self.shared.lock();
            if !m.is_fatal() {
                m.fail_incoming(p.inc, crate::matching::closed(p.peer));
            }
            return;
        }
        let cookie = p.rndv.cookie;
        let status = if p.inc.wanted() {
            // (before the ask: the payload may follow at once)
            lock(&c.read).expect(cookie, p.inc);
            ACK_OK
        } else {
            ACK_UNWANTED
        };
        let info = RndvInfo {
            word: status,
            cookie,
        };
        let _ = self.send_control(p.peer, info.encode(&Header::control(Kind::Ack, 0)));
    }

    /// Sends the payloads the receivers asked for since the last call.
    fn send_asked_payloads(&self) {
        for (peer, info) in self.shared.acks.take() {
            let Some(c) = self.conn(peer) else {
                continue;
            };
            let Some(held) = lock(&c.held).remove(&info.cookie) else {
                continue;
            };
            let id = info.cookie;
            if info.word != ACK_OK {
                // (the receive failed, and with it the job: the send is over)
                self.shared.update(|m| m.complete(id));
                continue;
            }
            // A request that failed meanwhile (a death, an abort) has handed
            // its buffer back to the caller: nothing may be read from it.
            if !self.shared.lock().is_pending(id) {
                continue;
            }
            let job = Job::Data {
                id,
                header: held.header,
                data: held.data,
                len: held.len,
                sent: 0,
            };
            if let Err(e) = self.enqueue(peer, job) {
                self.shared.update(|m| m.fail(id, e));
            }
        }
    }

    /// Queues a header-only control frame to `peer`.
    fn send_control(&self, peer: usize, header: [u8; HEADER_LEN]) -> Result<()> {
        let payload = Vec::new();
        self.enqueue(peer, Job::Control { header, payload })
    }

    /// Tells the peers that asked what this rank waits for (from the rank's
    /// own thread: a rank that is not inside shoal does not answer).
    fn answer_queries(&self, peers: &[usize]) {
        let header = waiting(self.shared.lock().blocked());
        for &peer in peers {
            let _ = self.send_control(peer, header);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn io_err(msg: &str) -> TransportError {
    TransportError::Io(format!("tcp: {msg}"))
}

fn io(e: std::io::Error) -> TransportError {
    io_err(&e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_with_no_acks_pending_takes_no_lock() {
        let acks = Acks::default();
        let held = acks.list.lock().unwrap();
        // Were the lock taken, this would wait on ourselves forever.
        assert!(acks.take().is_empty());
        drop(held);
        acks.push(1, RndvInfo { word: 0, cookie: 7 });
        acks.push(2, RndvInfo { word: 1, cookie: 8 });
        let taken: Vec<(usize, u64)> = acks.take().iter().map(|(p, i)| (*p, i.cookie)).collect();
        assert_eq!(taken, [(1, 7), (2, 8)]);
        assert!(acks.take().is_empty());
    }
}
