//! The TCP store server. One gatekeeper thread accepts connections and runs
//! their handshakes, many at once and without a thread each, so strangers
//! holding connections open cost a descriptor and a few bytes, and are
//! dropped after [`HANDSHAKE_TIMEOUT`]. A connection that proves the job's
//! secret gets a thread that serves its requests (there are about as many
//! as ranks, bounded by [`StoreLimits::max_connections`]).

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::auth::{Key, KEY_BYTES};

use super::handshake::{
    Refusal, Reply, ServerHandshake, ACCEPTED, FULL, GREETING_LEN, HANDSHAKE_TIMEOUT, REFUSED,
};
use super::wire::{put_bytes, Request, ST_ERROR, ST_OK, ST_TIMEOUT};
use crate::secret::JobSecret;
use crate::store::mem::Waited;
use crate::store::{lock, with_context, MemStore, StoreLimits};
use crate::KvStore;

/// Handshakes in progress at most. A new connection beyond it drops the
/// oldest one: a rank finishes its handshake within milliseconds of
/// connecting, so strangers opening connections cannot lock ranks out.
const MAX_PENDING: usize = 128;
/// How often the gatekeeper looks at the stop flag and the handshake deadlines.
const POLL_MS: i32 = 100;
/// Pause after `accept` fails for want of descriptors or memory, when no
/// handshake can be dropped to free one (the listener stays readable, so
/// retrying at once would spin).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Refused connections are reported on stderr at most this often.
const REPORT_EVERY: Duration = Duration::from_secs(10);
/// Stack of a connection's thread: it parses requests into heap buffers and
/// waits on a condition variable, so a small stack keeps many ranks cheap.
const CLIENT_STACK: usize = 256 << 10;

/// State shared by the server's threads: the keys live in a [`MemStore`],
/// whose waits also end when the server stops.
struct Shared {
    store: MemStore,
    stopping: AtomicBool,
    max_value: usize,
}

impl Shared {
    /// Executes one request and encodes its reply; `None` when the server
    /// is stopping and the connection should close unanswered (so the
    /// client reports that the store went away rather than a timeout).
    fn serve(&self, req: Request) -> Option<Vec<u8>> {
        let mut reply = vec![ST_OK];
        // A memory store's operations cannot fail but for a counter that is
        // not a number (ADD), which the client is told.
        let answered = match req {
            Request::Set(key, value) => self.store.set(&key, &value),
            Request::Get(key, timeout) => {
                let stopping = || self.stopping.load(Ordering::SeqCst);
                match self.store.wait_for(&key, timeout, &stopping) {
                    Waited::Found(v) => put_bytes(&mut reply, &v),
                    Waited::TimedOut => reply[0] = ST_TIMEOUT,
                    Waited::Stopped => return None,
                }
                Ok(())
            }
            Request::Add(key, delta) => self
                .store
                .add(&key, delta)
                .map(|v| reply.extend_from_slice(&v.to_le_bytes())),
            Request::Check(keys) => {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                self.store.check(&keys).map(|all| reply.push(all as u8))
            }
            Request::Delete(key) => self.store.delete(&key).map(|gone| reply.push(gone as u8)),
        };
        Some(match answered {
            Ok(()) => reply,
            Err(e) => error_reply(&e.to_string()),
        })
    }

    /// Serves one authenticated connection until the client leaves, sends
    /// a malformed request (answered with ERROR, then closed) or the server stops.
    fn handle(&self, stream: TcpStream) {
        let Ok(mut writer) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(stream);
        loop {
            let reply = match Request::read(&mut reader, self.max_value) {
                Ok(Some(req)) => self.serve(req),
                Ok(None) => None,
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    let _ = writer.write_all(&error_reply(&e.to_string()));
                    None
                }
                Err(_) => None,
            };
            let sent = reply.is_some_and(|r| writer.write_all(&r).is_ok());
            if !sent || self.stopping.load(Ordering::SeqCst) {
                break;
            }
        }
        let _ = writer.shutdown(Shutdown::Both);
    }
}

fn error_reply(message: &str) -> Vec<u8> {
    let mut reply = vec![ST_ERROR];
    put_bytes(&mut reply, message.as_bytes());
    reply
}

/// The authenticated connections being served, by id: a handle to shut
/// each socket down, and its thread. A thread removes its own entry when its
/// connection ends, so the socket closes at once (the handle is a second
/// descriptor of it) and the entries count the live connections.
#[derive(Default)]
struct Clients {
    next_id: u64,
    live: HashMap<u64, (TcpStream, JoinHandle<()>)>,
}

/// Serves a key-value store over TCP to the holders of one job secret.
///
/// Dropping the server stops it: it stops accepting, closes every connection
/// (a client blocked in GET sees the connection close, not a timeout) and
/// joins its threads.
pub struct TcpStoreServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    clients: Arc<Mutex<Clients>>,
    gatekeeper: Option<JoinHandle<()>>,
}

impl TcpStoreServer {
    /// Binds `bind` ("host:port"; port 0 picks a free port) and serves the
    /// clients that prove they hold `secret`. A bind error keeps its kind
    /// (callers fall back on `AddrNotAvailable`).
    pub fn start(
        bind: &str,
        secret: &JobSecret,
        limits: StoreLimits,
    ) -> io::Result<TcpStoreServer> {
        let listener = TcpListener::bind(bind)
            .map_err(|e| with_context(e, format!("store server could not bind {bind}")))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            // (its own get timeout is unused: GET requests carry theirs)
            store: MemStore::default(),
            stopping: AtomicBool::new(false),
            max_value: limits.max_value,
        });
        let clients = Arc::new(Mutex::new(Clients::default()));
        let gatekeeper = Gatekeeper {
            listener,
            key: secret.key.derive("store"),
            max_connections: limits.max_connections,
            shared: shared.clone(),
            clients: clients.clone(),
            pending: VecDeque::new(),
            refusals: RefusalLog::new(addr),
        };
        let gatekeeper = thread::Builder::new()
            .name("shoal-store-gate".into())
            .spawn(move || gatekeeper.run())?;
        Ok(TcpStoreServer {
            addr,
            shared,
            clients,
            gatekeeper: Some(gatekeeper),
        })
    }

    /// The address the server is bound to (with the actual port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// An address a client on this host can connect to: the bound address,
    /// with an unspecified IP (0.0.0.0 / ::) replaced by loopback.
    pub fn local_connect_addr(&self) -> SocketAddr {
        let mut a = self.addr;
        if a.ip().is_unspecified() {
            a.set_ip(match a {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        a
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.store.wake_all();
        if let Some(g) = self.gatekeeper.take() {
            let _ = g.join();
        }
        let clients = std::mem::take(&mut lock(&self.clients).live);
        for (stream, _) in clients.values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        for (_, thread) in clients.into_values() {
            let _ = thread.join();
        }
    }
}

// ---------------------------------------------------------------------------
// The gatekeeper

/// A connection in its handshake.
struct Pending {
    stream: TcpStream,
    handshake: ServerHandshake,
    /// The part of the client's next message received so far.
    received: Vec<u8>,
    deadline: Instant,
}

/// Accepts connections and runs their handshakes (see the module docs).
struct Gatekeeper {
    listener: TcpListener,
    key: Key,
    max_connections: usize,
    shared: Arc<Shared>,
    clients: Arc<Mutex<Clients>>,
    /// Oldest first.
    pending: VecDeque<Pending>,
    refusals: RefusalLog,
}

impl Gatekeeper {
    fn run(mut self) {
        while !self.shared.stopping.load(Ordering::SeqCst) {
            self.poll_once();
            self.drop_expired();
            self.refusals.report_if_due();
        }
    }

    /// Waits up to [`POLL_MS`] for a new connection or handshake bytes and
    /// handles what arrived.
    fn poll_once(&mut self) {
        let socket = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds: Vec<libc::pollfd> = std::iter::once(self.listener.as_raw_fd())
            .chain(self.pending.iter().map(|p| p.stream.as_raw_fd()))
            .map(socket)
            .collect();
        // SAFETY: `fds` is a valid array of pollfd of the given length.
        if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_MS) } <= 0 {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        for (p, fd) in pending.into_iter().zip(&fds[1..]) {
            let next = if fd.revents != 0 {
                self.advance(p)
            } else {
                Some(p)
            };
            self.pending.extend(next);
        }
        if fds[0].revents != 0 {
            self.accept_all();
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.begin(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(e) => {
                    // Out of descriptors or memory: free one by dropping the
                    // oldest handshake, or wait for one to be freed.
                    self.refusals.accept_failed(&e);
                    if self.pending.pop_front().is_some() {
                        self.refusals.note(Why::CrowdedOut);
                    } else {
                        thread::sleep(ACCEPT_BACKOFF);
                    }
                    return;
                }
            }
        }
    }

    fn begin(&mut self, stream: TcpStream) {
        let Ok(handshake) = ServerHandshake::new() else {
            return;
        };
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let _ = stream.set_nodelay(true);
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
            self.refusals.note(Why::CrowdedOut);
        }
        self.pending.push_back(Pending {
            stream,
            handshake,
            received: Vec::with_capacity(GREETING_LEN),
            deadline: Instant::now() + HANDSHAKE_TIMEOUT,
        });
    }

    /// Reads what `p` sent and takes its handshake as far as it goes;
    /// returns it if it still waits for bytes.
    fn advance(&mut self, mut p: Pending) -> Option<Pending> {
        loop {
            let wanted = p.handshake.wanted();
            let mut buf = [0u8; GREETING_LEN];
            match p.stream.read(&mut buf[..wanted - p.received.len()]) {
                Ok(0) => {
                    self.refusals.note(Why::Unfinished);
                    return None;
                }
                Ok(n) => p.received.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(p),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.refusals.note(Why::Unfinished);
                    return None;
                }
            }
            if p.handshake.refuses_early(&p.received) {
                self.refusals.note(Why::NotShoal);
                return None;
            }
            if p.received.len() < wanted {
                continue;
            }
            let message = std::mem::take(&mut p.received);
            match p.handshake.take(&self.key, &message) {
                Ok(Reply::Challenge(challenge)) => {
                    if !send_now(&mut p.stream, &challenge) {
                        self.refusals.note(Why::Unfinished);
                        return None;
                    }
                }
                Ok(Reply::Accepted(proof)) => {
                    self.admit(p.stream, &proof);
                    return None;
                }
                Err(refusal) => {
                    if refusal == Refusal::WrongSecret {
                        send_now(&mut p.stream, &[REFUSED]);
                    }
                    self.refusals.note(Why::from(refusal));
                    return None;
                }
            }
        }
    }

    /// Gives an authenticated connection its thread, unless the server
    /// already serves as many as it may.
    fn admit(&mut self, mut stream: TcpStream, proof: &[u8; KEY_BYTES]) {
        let mut clients = lock(&self.clients);
        if clients.live.len() >= self.max_connections {
            send_now(&mut stream, &[FULL]);
            self.refusals.note(Why::Full);
            return;
        }
        let mut verdict = vec![ACCEPTED];
        verdict.extend_from_slice(proof);
        if !send_now(&mut stream, &verdict) || stream.set_nonblocking(false).is_err() {
            return;
        }
        let Ok(handle) = stream.try_clone() else {
            return;
        };
        let id = clients.next_id;
        clients.next_id += 1;
        let (shared, registry) = (self.shared.clone(), self.clients.clone());
        let spawned = thread::Builder::new()
            .name("shoal-store-client".into())
            .stack_size(CLIENT_STACK)
            .spawn(move || {
                shared.handle(stream);
                // Waits until the gatekeeper has registered this thread (it
                // holds the lock while spawning), then closes the handle.
                lock(&registry).live.remove(&id);
            });
        if let Ok(thread) = spawned {
            clients.live.insert(id, (handle, thread));
        }
    }

    fn drop_expired(&mut self) {
        let now = Instant::now();
        let before = self.pending.len();
        self.pending.retain(|p| p.deadline > now);
        for _ in self.pending.len()..before {
            self.refusals.note(Why::Unfinished);
        }
    }
}

/// Writes a handshake message on a non-blocking socket. The messages are
/// tens of bytes and the socket's send buffer is empty at that point, so a
/// write that does not take them whole means the connection is broken.
fn send_now(stream: &mut TcpStream, bytes: &[u8]) -> bool {
    matches!(stream.write(bytes), Ok(n) if n == bytes.len())
}

// ---------------------------------------------------------------------------
// Reporting refusals

/// Why a connection was turned away.
#[derive(Clone, Copy)]
enum Why {
    NotShoal,
    WrongSecret,
    Unfinished,
    CrowdedOut,
    Full,
}

impl Why {
    const ALL: [Why; 5] = [
        Why::NotShoal,
        Why::WrongSecret,
        Why::Unfinished,
        Why::CrowdedOut,
        Why::Full,
    ];

    fn describe(self) -> String {
        match self {
            Why::NotShoal => "without the store handshake".into(),
            Why::WrongSecret => "with a wrong job secret".into(),
            Why::Unfinished => format!(
                "that did not finish the handshake (left, or silent for {}s)",
                HANDSHAKE_TIMEOUT.as_secs()
            ),
            Why::CrowdedOut => "crowded out by newer handshakes".into(),
            Why::Full => "beyond the connection limit".into(),
        }
    }
}

impl From<Refusal> for Why {
    fn from(r: Refusal) -> Why {
        match r {
            Refusal::NotShoal => Why::NotShoal,
            Refusal::WrongSecret => Why::WrongSecret,
        }
    }
}

/// Counts turned-away connections and reports them on stderr at most once
/// per [`REPORT_EVERY`], so a flood of strangers cannot flood the log.
struct RefusalLog {
    addr: SocketAddr,
    counts: [u64; Why::ALL.len()],
    accept_error: Option<String>,
    last_report: Option<Instant>,
}

impl RefusalLog {
    fn new(addr: SocketAddr) -> RefusalLog {
        RefusalLog {
            addr,
            counts: [0; Why::ALL.len()],
            accept_error: None,
            last_report: None,
        }
    }

    fn note(&mut self, why: Why) {
        self.counts[why as usize] += 1;
    }

    fn accept_failed(&mut self, e: &io::Error) {
        self.accept_error = Some(e.to_string());
    }

    fn report_if_due(&mut self) {
        let total: u64 = self.counts.iter().sum();
        let due = self.last_report.is_none_or(|t| t.elapsed() >= REPORT_EVERY);
        if (total == 0 && self.accept_error.is_none()) || !due {
            return;
        }
        // A log record (SHOAL_LOG), so it reaches Python logging and the log file.
        tracing::warn!("{}", self.report());
        self.counts = [0; Why::ALL.len()];
        self.accept_error = None;
        self.last_report = Some(Instant::now());
    }

    fn report(&self) -> String {
        let total: u64 = self.counts.iter().sum();
        let reasons: Vec<String> = Why::ALL
            .iter()
            .filter(|&&w| self.counts[w as usize] > 0)
            .map(|&w| format!("{} {}", self.counts[w as usize], w.describe()))
            .collect();
        let mut text = format!(
            "the store on {} refused {total} connection(s): {}",
            self.addr,
            reasons.join(", ")
        );
        if self.counts[Why::WrongSecret as usize] > 0 {
            text.push_str(
                "; if they are ranks of this job: every rank must hold the same job secret \
                 (shoal run sets SHOAL_SECRET)",
            );
        }
        if let Some(e) = &self.accept_error {
            text.push_str(&format!("; accepting failed: {e}"));
        }
        text.push_str(&format!(
            " (reported at most every {}s)",
            REPORT_EVERY.as_secs()
        ));
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_reported_by_reason_at_most_every_period() {
        let mut log = RefusalLog::new("127.0.0.1:1".parse().unwrap());
        log.note(Why::NotShoal);
        log.note(Why::NotShoal);
        log.note(Why::WrongSecret);
        let text = log.report();
        assert!(
            text.contains(
                "the store on 127.0.0.1:1 refused 3 connection(s): 2 without the store \
                 handshake, 1 with a wrong job secret"
            ) && text.contains("SHOAL_SECRET"),
            "{text}"
        );
        log.report_if_due(); // the first report is due at once, and resets the counts
        assert_eq!(log.counts.iter().sum::<u64>(), 0);
        log.note(Why::Full);
        log.report_if_due(); // the next only after REPORT_EVERY
        assert_eq!(log.counts.iter().sum::<u64>(), 1);
    }
}
