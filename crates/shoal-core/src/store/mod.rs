//! Key-value stores used during rendezvous: ranks publish addresses, segment
//! names and host ids here and block until their peers' entries appear.
//!
//! * [`TcpStoreServer`] / [`TcpStore`]: one process (usually rank 0) serves,
//!   everyone connects. Works across hosts.
//! * [`FileStore`]: a directory on a file system every rank can see (a shared
//!   NFS/Lustre mount, or `/tmp` for one host). Needs no open port.
//! * [`Store`]: either of the two behind one type, so callers can `add`.
//! * [`ScopedStore`]: a view that prefixes every key, so several jobs (or
//!   several initialisations of one job) share one store without colliding.
//!
//! Counters written by `add` are stored as decimal ASCII, so `get` on a
//! counter key returns e.g. `b"3"` (the convention of torch's TCPStore).
//!
//! # Wire protocol of the TCP store
//!
//! Every request is one message and gets exactly one reply, in order, on the
//! same connection. Integers are little-endian. `bytes` is `len: u32` followed
//! by `len` bytes; keys are UTF-8.
//!
//! ```text
//! request := op: u8, body
//!   SET    = 1  key: bytes, value: bytes        -> OK
//!   GET    = 2  key: bytes, timeout_ms: u64     -> OK value: bytes | TIMEOUT
//!   ADD    = 3  key: bytes, delta: i64          -> OK new_value: i64 | ERROR
//!   CHECK  = 4  n: u32, n x key: bytes          -> OK all_present: u8
//!   DELETE = 5  key: bytes                      -> OK existed: u8
//! reply   := status: u8, payload
//!   OK = 0 (payload as above), TIMEOUT = 1 (none), ERROR = 2 (message: bytes)
//! ```
//!
//! GET blocks on the server until the key is set or `timeout_ms` passes, so a
//! waiting client costs no polling traffic. A request the server cannot parse
//! (unknown op, oversized field, invalid UTF-8) closes that connection only.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use shoal_transport::KvStore;

const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_ADD: u8 = 3;
const OP_CHECK: u8 = 4;
const OP_DELETE: u8 = 5;

const ST_OK: u8 = 0;
const ST_TIMEOUT: u8 = 1;
const ST_ERROR: u8 = 2;

/// Longest key the server accepts; keys are short names, so anything longer
/// is a corrupt or hostile request.
const MAX_KEY: usize = 64 << 10;
/// Largest value the server accepts (bounds the allocation a request can cause).
const MAX_VALUE: usize = 256 << 20;
/// Most keys one CHECK may name.
const MAX_CHECK_KEYS: usize = 1 << 20;
/// Extra time a client waits for a GET reply beyond the GET's own timeout,
/// covering network delay before it declares the server unresponsive.
const REPLY_GRACE: Duration = Duration::from_secs(10);

/// The error every store returns when a key does not appear in time.
fn key_timeout(store: &str, key: &str, timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "{store}: timed out after {}s waiting for key '{key}'",
            fmt_secs(timeout)
        ),
    )
}

/// Seconds without a trailing `.0` for whole numbers: "30", "0.5".
fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}

/// `now + timeout`, saturating: an "infinite" timeout must not overflow `Instant`.
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

/// Adds `context` in front of an error's message, keeping its kind.
fn with_context(e: io::Error, context: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{context}: {e}"))
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Parses a counter value; a missing key counts as 0.
fn parse_counter(key: &str, value: Option<&[u8]>) -> io::Result<i64> {
    match value {
        None => Ok(0),
        Some(v) => std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| {
                invalid(format!(
                    "key '{key}' holds {:?}, not an integer counter",
                    String::from_utf8_lossy(v)
                ))
            }),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another thread holding the lock leaves the data consistent
    // for our simple maps, so keep serving instead of propagating the poison.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------
// Wire encoding

fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    buf.extend_from_slice(&(b.len() as u32).to_le_bytes());
    buf.extend_from_slice(b);
}

fn read_array<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut a = [0u8; N];
    r.read_exact(&mut a)?;
    Ok(a)
}

fn read_u8(r: &mut impl Read) -> io::Result<u8> {
    Ok(read_array::<1>(r)?[0])
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    Ok(u32::from_le_bytes(read_array(r)?))
}

fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    Ok(u64::from_le_bytes(read_array(r)?))
}

fn read_bytes(r: &mut impl Read, max: usize) -> io::Result<Vec<u8>> {
    let len = read_u32(r)? as usize;
    if len > max {
        return Err(invalid(format!(
            "field of {len} bytes exceeds the limit of {max}"
        )));
    }
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn read_key(r: &mut impl Read) -> io::Result<String> {
    String::from_utf8(read_bytes(r, MAX_KEY)?).map_err(|_| invalid("key is not UTF-8"))
}

// ---------------------------------------------------------------------------
// Server

/// State shared by the server's threads.
struct Shared {
    map: Mutex<HashMap<String, Vec<u8>>>,
    /// Signalled whenever a key is set, and on shutdown.
    changed: Condvar,
    stopping: AtomicBool,
}

/// A parsed request.
enum Request {
    Set(String, Vec<u8>),
    Get(String, Duration),
    Add(String, i64),
    Check(Vec<String>),
    Delete(String),
}

impl Request {
    /// Reads one request; `Ok(None)` when the client closed the connection cleanly.
    fn read(r: &mut impl Read) -> io::Result<Option<Request>> {
        let op = match read_u8(r) {
            Ok(op) => op,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        };
        let req = match op {
            OP_SET => Request::Set(read_key(r)?, read_bytes(r, MAX_VALUE)?),
            OP_GET => Request::Get(read_key(r)?, Duration::from_millis(read_u64(r)?)),
            OP_ADD => Request::Add(read_key(r)?, read_u64(r)? as i64),
            OP_CHECK => {
                let n = read_u32(r)? as usize;
                if n > MAX_CHECK_KEYS {
                    return Err(invalid(format!("CHECK of {n} keys exceeds the limit")));
                }
                Request::Check((0..n).map(|_| read_key(r)).collect::<io::Result<_>>()?)
            }
            OP_DELETE => Request::Delete(read_key(r)?),
            other => return Err(invalid(format!("unknown op {other}"))),
        };
        Ok(Some(req))
    }
}

impl Shared {
    /// Executes one request and encodes its reply.
    fn serve(&self, req: Request) -> Vec<u8> {
        let mut reply = vec![ST_OK];
        match req {
            Request::Set(key, value) => {
                lock(&self.map).insert(key, value);
                self.changed.notify_all();
            }
            Request::Get(key, timeout) => match self.wait_for(&key, timeout) {
                Some(v) => put_bytes(&mut reply, &v),
                None => reply[0] = ST_TIMEOUT,
            },
            Request::Add(key, delta) => match self.add(&key, delta) {
                Ok(v) => reply.extend_from_slice(&v.to_le_bytes()),
                Err(e) => {
                    reply[0] = ST_ERROR;
                    put_bytes(&mut reply, e.to_string().as_bytes());
                }
            },
            Request::Check(keys) => {
                let map = lock(&self.map);
                reply.push(keys.iter().all(|k| map.contains_key(k)) as u8);
            }
            Request::Delete(key) => reply.push(lock(&self.map).remove(&key).is_some() as u8),
        }
        reply
    }

    /// Blocks until `key` exists, the timeout passes, or the server stops.
    fn wait_for(&self, key: &str, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = deadline_after(timeout);
        let mut map = lock(&self.map);
        loop {
            if let Some(v) = map.get(key) {
                return Some(v.clone());
            }
            let now = Instant::now();
            if now >= deadline || self.stopping.load(Ordering::SeqCst) {
                return None;
            }
            map = self
                .changed
                .wait_timeout(map, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        let mut map = lock(&self.map);
        let new = parse_counter(key, map.get(key).map(Vec::as_slice))?.wrapping_add(delta);
        map.insert(key.to_string(), new.to_string().into_bytes());
        self.changed.notify_all();
        Ok(new)
    }

    /// Serves one connection until the client leaves or sends garbage.
    fn handle(&self, stream: TcpStream) {
        let Ok(write_half) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(stream);
        let mut writer = write_half;
        while let Ok(Some(req)) = Request::read(&mut reader) {
            let reply = self.serve(req);
            if writer.write_all(&reply).is_err() || self.stopping.load(Ordering::SeqCst) {
                break;
            }
        }
        let _ = writer.shutdown(Shutdown::Both);
    }
}

/// A connected client: a handle to shut its socket down, and its thread.
type ClientSlot = (TcpStream, JoinHandle<()>);

/// Serves a key-value store over TCP, one thread per client connection.
///
/// Dropping the server stops it: it stops accepting, releases blocked GETs
/// (which reply TIMEOUT), closes every connection and joins its threads.
pub struct TcpStoreServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    clients: Arc<Mutex<Vec<ClientSlot>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl TcpStoreServer {
    /// Binds `bind` ("host:port"; port 0 picks a free port) and starts serving.
    pub fn start(bind: &str) -> io::Result<TcpStoreServer> {
        let listener = TcpListener::bind(bind)
            .map_err(|e| with_context(e, format!("store server could not bind {bind}")))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            map: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
        });
        let clients = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (shared, clients) = (shared.clone(), clients.clone());
            thread::Builder::new()
                .name("shoal-store-accept".into())
                .spawn(move || accept_loop(listener, shared, clients))?
        };
        Ok(TcpStoreServer {
            addr,
            shared,
            clients,
            acceptor: Some(acceptor),
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

/// How often the acceptor checks whether the server is stopping.
const ACCEPT_POLL_MS: i32 = 100;

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, clients: Arc<Mutex<Vec<ClientSlot>>>) {
    while !shared.stopping.load(Ordering::SeqCst) {
        if !readable(&listener, ACCEPT_POLL_MS) {
            continue;
        }
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let _ = stream.set_nodelay(true);
        let Ok(handle_copy) = stream.try_clone() else {
            continue;
        };
        let worker_shared = shared.clone();
        let spawned = thread::Builder::new()
            .name("shoal-store-client".into())
            .spawn(move || worker_shared.handle(stream));
        if let Ok(thread) = spawned {
            let mut list = lock(&clients);
            list.retain(|(_, t)| !t.is_finished());
            list.push((handle_copy, thread));
        }
    }
}

/// Waits up to `ms` for a connection to become acceptable, so the acceptor
/// can notice a stop request without needing a wake-up connection.
fn readable(listener: &TcpListener, ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: pfd is a valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, ms) > 0 }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        {
            // Taking the lock orders the flag before any waiter's next check.
            let _map = lock(&self.shared.map);
            self.shared.changed.notify_all();
        }
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let clients = std::mem::take(&mut *lock(&self.clients));
        for (stream, _) in &clients {
            let _ = stream.shutdown(Shutdown::Both);
        }
        for (_, thread) in clients {
            let _ = thread.join();
        }
    }
}

// ---------------------------------------------------------------------------
// TCP client

/// A client of [`TcpStoreServer`]. Thread-safe: requests from several threads
/// are serialised over one connection. After an I/O error the connection is
/// dropped and the next request reconnects once.
pub struct TcpStore {
    addr: String,
    timeout: Duration,
    conn: Mutex<Option<TcpStream>>,
}

impl TcpStore {
    /// Connects to the server at `addr` ("host:port"), retrying until
    /// `timeout` because the server usually starts at about the same time as
    /// its clients. `timeout` also bounds every later `get`.
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<TcpStore> {
        let stream = connect_retrying(addr, timeout)?;
        // Bounds how long any reply may take, so a hung server is detected.
        stream.set_read_timeout(Some(timeout.saturating_add(REPLY_GRACE)))?;
        Ok(TcpStore {
            addr: addr.to_string(),
            timeout,
            conn: Mutex::new(Some(stream)),
        })
    }

    /// The server address this client talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Atomically adds `delta` to the counter at `key` (missing = 0) and
    /// returns the new value.
    pub fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        let mut req = vec![OP_ADD];
        put_bytes(&mut req, key.as_bytes());
        req.extend_from_slice(&delta.to_le_bytes());
        let v = self.request("add", key, &req, |r| Ok(read_u64(r)? as i64))?;
        v.ok_or_else(|| {
            invalid(format!(
                "store {}: add '{key}': unexpected TIMEOUT",
                self.addr
            ))
        })
    }

    /// Whether all `keys` exist, without waiting.
    pub fn check(&self, keys: &[&str]) -> io::Result<bool> {
        let mut req = vec![OP_CHECK];
        req.extend_from_slice(&(keys.len() as u32).to_le_bytes());
        keys.iter().for_each(|k| put_bytes(&mut req, k.as_bytes()));
        let what = keys.join("', '");
        let v = self.request("check", &what, &req, |r| Ok(read_u8(r)? != 0))?;
        Ok(v.unwrap_or(false))
    }

    /// Removes `key`; returns whether it existed.
    pub fn delete(&self, key: &str) -> io::Result<bool> {
        let mut req = vec![OP_DELETE];
        put_bytes(&mut req, key.as_bytes());
        Ok(self
            .request("delete", key, &req, |r| Ok(read_u8(r)? != 0))?
            .unwrap_or(false))
    }

    /// Sends one request and parses its reply; `Ok(None)` means TIMEOUT.
    /// Errors name the server, the operation and the key.
    fn request<T>(
        &self,
        op: &str,
        key: &str,
        req: &[u8],
        parse: impl FnOnce(&mut TcpStream) -> io::Result<T>,
    ) -> io::Result<Option<T>> {
        let context = || format!("store {}: {op} '{key}'", self.addr);
        let mut conn = lock(&self.conn);
        if conn.is_none() {
            let stream = connect_once(&self.addr)
                .and_then(|s| {
                    s.set_read_timeout(Some(self.timeout.saturating_add(REPLY_GRACE)))
                        .map(|_| s)
                })
                .map_err(|e| with_context(e, context()))?;
            *conn = Some(stream);
        }
        let stream = conn.as_mut().expect("connection was just established");
        let result = exchange(stream, req, parse);
        if result.is_err() {
            // The reply stream may be out of step with our requests now.
            *conn = None;
        }
        result.map_err(|e| with_context(e, context()))
    }
}

/// Writes a request and reads its status and payload.
fn exchange<T>(
    stream: &mut TcpStream,
    req: &[u8],
    parse: impl FnOnce(&mut TcpStream) -> io::Result<T>,
) -> io::Result<Option<T>> {
    stream.write_all(req)?;
    match read_u8(stream)? {
        ST_OK => parse(stream).map(Some),
        ST_TIMEOUT => Ok(None),
        ST_ERROR => {
            let msg = read_bytes(stream, MAX_VALUE)?;
            Err(invalid(String::from_utf8_lossy(&msg).into_owned()))
        }
        s => Err(invalid(format!("server sent unknown status {s}"))),
    }
}

/// One connection attempt to each address `addr` resolves to.
fn connect_once(addr: &str) -> io::Result<TcpStream> {
    connect_within(addr, Duration::from_secs(5))
}

fn connect_within(addr: &str, limit: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolved to nothing");
    for sa in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&sa, limit.max(Duration::from_millis(1))) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Connects, retrying with backoff until `timeout` passes.
fn connect_retrying(addr: &str, timeout: Duration) -> io::Result<TcpStream> {
    let deadline = deadline_after(timeout);
    let mut backoff = Duration::from_millis(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match connect_within(addr, left.min(Duration::from_secs(5))) {
            Ok(s) => return Ok(s),
            Err(e) if left.is_zero() => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "could not connect to the store at {addr} within {}s: {e}",
                        fmt_secs(timeout)
                    ),
                ))
            }
            Err(_) => thread::sleep(backoff.min(left)),
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

impl KvStore for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        let mut req = vec![OP_SET];
        put_bytes(&mut req, key.as_bytes());
        put_bytes(&mut req, value);
        self.request("set", key, &req, |_| Ok(())).map(|_| ())
    }

    fn get(&self, key: &str) -> io::Result<Vec<u8>> {
        let mut req = vec![OP_GET];
        put_bytes(&mut req, key.as_bytes());
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        req.extend_from_slice(&timeout_ms.to_le_bytes());
        let v = self.request("get", key, &req, |r| read_bytes(r, MAX_VALUE))?;
        v.ok_or_else(|| key_timeout(&format!("store {}", self.addr), key, self.timeout))
    }
}

// ---------------------------------------------------------------------------
// File store

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

impl FileStore {
    /// Uses (and creates if needed) `dir`; `timeout` bounds every `get`.
    pub fn new(dir: impl AsRef<Path>, timeout: Duration) -> io::Result<FileStore> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)
            .map_err(|e| with_context(e, format!("file store {}", dir.display())))?;
        Ok(FileStore { dir, timeout })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Atomically adds `delta` to the counter at `key` (missing = 0) and
    /// returns the new value.
    pub fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        let _guard = self.lock_exclusive()?;
        let current = self.read(key)?;
        let new = parse_counter(key, current.as_deref())
            .map_err(|e| self.context(e, "add", key))?
            .wrapping_add(delta);
        self.set(key, new.to_string().as_bytes())?;
        Ok(new)
    }

    /// Whether all `keys` exist, without waiting.
    pub fn check(&self, keys: &[&str]) -> io::Result<bool> {
        Ok(keys.iter().all(|k| self.path(k).exists()))
    }

    /// Removes `key`; returns whether it existed.
    pub fn delete(&self, key: &str) -> io::Result<bool> {
        match fs::remove_file(self.path(key)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.context(e, "delete", key)),
        }
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

impl KvStore for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(format!(
            ".tmp.{}.{}",
            std::process::id(),
            TEMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let write = || -> io::Result<()> {
            let mut w = BufWriter::new(File::create(&tmp)?);
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

// ---------------------------------------------------------------------------
// One type for either store, and key scoping

/// Either kind of store, so code that needs `add` (generation counters) need
/// not be generic.
pub enum Store {
    Tcp(TcpStore),
    File(FileStore),
}

impl Store {
    /// Atomically adds `delta` to the counter at `key` (missing = 0) and
    /// returns the new value.
    pub fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        match self {
            Store::Tcp(s) => s.add(key, delta),
            Store::File(s) => s.add(key, delta),
        }
    }

    /// Whether all `keys` exist, without waiting.
    pub fn check(&self, keys: &[&str]) -> io::Result<bool> {
        match self {
            Store::Tcp(s) => s.check(keys),
            Store::File(s) => s.check(keys),
        }
    }

    /// Removes `key`; returns whether it existed.
    pub fn delete(&self, key: &str) -> io::Result<bool> {
        match self {
            Store::Tcp(s) => s.delete(key),
            Store::File(s) => s.delete(key),
        }
    }
}

impl KvStore for Store {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        match self {
            Store::Tcp(s) => s.set(key, value),
            Store::File(s) => s.set(key, value),
        }
    }

    fn get(&self, key: &str) -> io::Result<Vec<u8>> {
        match self {
            Store::Tcp(s) => s.get(key),
            Store::File(s) => s.get(key),
        }
    }
}

/// A view of a shared [`Store`] in which every key is prefixed with
/// `prefix/`. Hand one to each transport so that jobs, and successive
/// initialisations of one job, never read each other's keys.
#[derive(Clone)]
pub struct ScopedStore {
    store: Arc<Store>,
    prefix: String,
}

impl ScopedStore {
    pub fn new(store: Arc<Store>, prefix: impl Into<String>) -> ScopedStore {
        ScopedStore {
            store,
            prefix: prefix.into(),
        }
    }

    /// The prefix, without the trailing '/'.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A narrower scope inside this one: `prefix/sub`.
    pub fn scope(&self, sub: &str) -> ScopedStore {
        ScopedStore::new(self.store.clone(), format!("{}/{sub}", self.prefix))
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }

    pub fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        self.store.add(&self.key(key), delta)
    }

    pub fn check(&self, keys: &[&str]) -> io::Result<bool> {
        let full: Vec<String> = keys.iter().map(|k| self.key(k)).collect();
        self.store
            .check(&full.iter().map(String::as_str).collect::<Vec<_>>())
    }

    pub fn delete(&self, key: &str) -> io::Result<bool> {
        self.store.delete(&self.key(key))
    }
}

impl KvStore for ScopedStore {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        self.store.set(&self.key(key), value)
    }

    fn get(&self, key: &str) -> io::Result<Vec<u8>> {
        self.store.get(&self.key(key))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh, empty directory under the system temp dir.
    pub(crate) fn temp_dir(tag: &str) -> PathBuf {
        static N: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "shoal-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn server() -> TcpStoreServer {
        TcpStoreServer::start("127.0.0.1:0").unwrap()
    }

    fn client(s: &TcpStoreServer, timeout_ms: u64) -> TcpStore {
        let addr = s.local_connect_addr().to_string();
        TcpStore::connect(&addr, Duration::from_millis(timeout_ms)).unwrap()
    }

    /// The same behaviour checks for every store kind.
    fn check_basic(a: &Store, b: &Store) {
        a.set("k", b"v1").unwrap();
        assert_eq!(b.get("k").unwrap(), b"v1");
        a.set("k", b"").unwrap();
        assert_eq!(b.get("k").unwrap(), b"");
        assert!(b.check(&["k"]).unwrap());
        assert!(!b.check(&["k", "missing"]).unwrap());
        assert!(b.delete("k").unwrap());
        assert!(!b.delete("k").unwrap());
        assert!(!a.check(&["k"]).unwrap());
        assert_eq!(a.add("c", 5).unwrap(), 5);
        assert_eq!(b.add("c", -2).unwrap(), 3);
        assert_eq!(a.get("c").unwrap(), b"3");
        a.set("weird/key with spaces.é", b"x").unwrap();
        assert_eq!(b.get("weird/key with spaces.é").unwrap(), b"x");
        a.set("notnum", b"abc").unwrap();
        let e = b.add("notnum", 1).unwrap_err().to_string();
        assert!(e.contains("notnum") && e.contains("not an integer"), "{e}");
    }

    fn check_blocking_get(a: Arc<Store>, b: Arc<Store>) {
        let t = thread::spawn(move || b.get("late").unwrap());
        thread::sleep(Duration::from_millis(100));
        a.set("late", b"here").unwrap();
        assert_eq!(t.join().unwrap(), b"here");
    }

    fn check_timeout(s: &Store, timeout_ms: u64) {
        let t0 = Instant::now();
        let e = s.get("never").unwrap_err();
        let waited = t0.elapsed();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let msg = e.to_string();
        assert!(
            msg.contains("timed out after 0.3s waiting for key 'never'"),
            "{msg}"
        );
        assert!(
            waited >= Duration::from_millis(timeout_ms - 10),
            "{waited:?}"
        );
        assert!(
            waited < Duration::from_millis(timeout_ms + 2000),
            "{waited:?}"
        );
    }

    fn check_concurrent_add(stores: Vec<Arc<Store>>) {
        let per = 50;
        let threads: Vec<_> = stores
            .iter()
            .cloned()
            .map(|s| {
                thread::spawn(move || (0..per).map(|_| s.add("n", 1).unwrap()).collect::<Vec<_>>())
            })
            .collect();
        let mut seen: Vec<i64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        seen.sort();
        let n = (stores.len() * per) as i64;
        assert_eq!(
            seen,
            (1..=n).collect::<Vec<_>>(),
            "every add returns a distinct value"
        );
    }

    fn tcp_pair(timeout_ms: u64) -> (TcpStoreServer, Store, Store) {
        let s = server();
        let (a, b) = (client(&s, timeout_ms), client(&s, timeout_ms));
        (s, Store::Tcp(a), Store::Tcp(b))
    }

    fn file_pair(timeout_ms: u64) -> (PathBuf, Store, Store) {
        let d = temp_dir("fs");
        let t = Duration::from_millis(timeout_ms);
        let (a, b) = (
            FileStore::new(&d, t).unwrap(),
            FileStore::new(&d, t).unwrap(),
        );
        (d, Store::File(a), Store::File(b))
    }

    #[test]
    fn tcp_basic_ops() {
        let (_s, a, b) = tcp_pair(2000);
        check_basic(&a, &b);
    }

    #[test]
    fn file_basic_ops() {
        let (d, a, b) = file_pair(2000);
        check_basic(&a, &b);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn tcp_get_blocks_until_set() {
        let (_s, a, b) = tcp_pair(5000);
        check_blocking_get(Arc::new(a), Arc::new(b));
    }

    #[test]
    fn file_get_blocks_until_set() {
        let (d, a, b) = file_pair(5000);
        check_blocking_get(Arc::new(a), Arc::new(b));
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn tcp_get_times_out_with_clear_message() {
        let (s, a, _b) = tcp_pair(300);
        check_timeout(&a, 300);
        let msg = a.get("never").unwrap_err().to_string();
        assert!(msg.contains(&s.local_connect_addr().to_string()), "{msg}");
        // The connection is still usable after a timeout.
        a.set("k", b"v").unwrap();
        assert_eq!(a.get("k").unwrap(), b"v");
    }

    #[test]
    fn file_get_times_out_with_clear_message() {
        let (d, a, _b) = file_pair(300);
        check_timeout(&a, 300);
        let msg = a.get("never").unwrap_err().to_string();
        assert!(msg.contains(&d.display().to_string()), "{msg}");
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn tcp_add_from_many_clients_and_threads() {
        let s = server();
        let c = Arc::new(Store::Tcp(client(&s, 5000)));
        let mut stores: Vec<_> = (0..4)
            .map(|_| Arc::new(Store::Tcp(client(&s, 5000))))
            .collect();
        stores.extend((0..4).map(|_| c.clone())); // threads sharing one connection
        check_concurrent_add(stores);
    }

    #[test]
    fn file_add_from_many_threads() {
        let (d, a, b) = file_pair(5000);
        let (a, b) = (Arc::new(a), Arc::new(b));
        check_concurrent_add(vec![a.clone(), a.clone(), b.clone(), b]);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn many_clients_exchange_values() {
        let s = server();
        let n = 8;
        let threads: Vec<_> = (0..n)
            .map(|r| {
                let c = client(&s, 5000);
                thread::spawn(move || {
                    c.set(&format!("rank/{r}"), format!("v{r}").as_bytes())
                        .unwrap();
                    (0..n)
                        .map(|p| c.get(&format!("rank/{p}")).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let expect: Vec<Vec<u8>> = (0..n).map(|p| format!("v{p}").into_bytes()).collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), expect);
        }
    }

    #[test]
    fn client_retries_until_server_starts() {
        // Reserve a free port, release it, and start the server there later.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let a2 = addr.clone();
        let t = thread::spawn(move || {
            let c = TcpStore::connect(&a2, Duration::from_secs(10)).unwrap();
            c.get("hello").unwrap()
        });
        thread::sleep(Duration::from_millis(300));
        let s = TcpStoreServer::start(&addr).unwrap();
        client(&s, 5000).set("hello", b"world").unwrap();
        assert_eq!(t.join().unwrap(), b"world");
    }

    #[test]
    fn connect_timeout_names_address() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let e = TcpStore::connect(&addr, Duration::from_millis(200))
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let msg = e.to_string();
        assert!(msg.contains(&addr) && msg.contains("within 0.2s"), "{msg}");
    }

    #[test]
    fn server_survives_disconnects_and_garbage() {
        let s = server();
        let addr = s.local_connect_addr();
        // A client that leaves mid-request.
        let mut raw = TcpStream::connect(addr).unwrap();
        raw.write_all(&[OP_SET, 10, 0]).unwrap();
        drop(raw);
        // A client sending an unknown op gets its connection closed.
        let mut raw = TcpStream::connect(addr).unwrap();
        raw.write_all(&[99, 1, 2, 3]).unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(raw.read(&mut buf).unwrap_or(0), 0);
        // An oversized length field is refused without allocating it.
        let mut raw = TcpStream::connect(addr).unwrap();
        raw.write_all(&[OP_SET, 0xff, 0xff, 0xff, 0xff]).unwrap();
        assert_eq!(raw.read(&mut buf).unwrap_or(0), 0);
        // A client that disconnects while blocked in GET.
        let c = client(&s, 5000);
        let mut raw = TcpStream::connect(addr).unwrap();
        let mut req = vec![OP_GET];
        put_bytes(&mut req, b"nothing");
        req.extend_from_slice(&200u64.to_le_bytes());
        raw.write_all(&req).unwrap();
        drop(raw);
        c.set("still", b"alive").unwrap();
        assert_eq!(c.get("still").unwrap(), b"alive");
    }

    #[test]
    fn dropping_server_releases_waiters_and_clients() {
        let s = server();
        let c = Arc::new(client(&s, 30_000));
        let c2 = c.clone();
        let t = thread::spawn(move || c2.get("never"));
        thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        drop(s);
        assert!(t.join().unwrap().is_err());
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "drop took {:?}",
            t0.elapsed()
        );
        let e = c.set("k", b"v").unwrap_err().to_string();
        assert!(e.contains("set 'k'"), "{e}");
    }

    #[test]
    fn scoped_stores_do_not_collide() {
        let s = server();
        let store = Arc::new(Store::Tcp(client(&s, 300)));
        let (j1, j2) = (
            ScopedStore::new(store.clone(), "job1"),
            ScopedStore::new(store, "job2"),
        );
        j1.set("k", b"1").unwrap();
        j2.set("k", b"2").unwrap();
        assert_eq!(j1.get("k").unwrap(), b"1");
        assert_eq!(j2.scope("x").prefix(), "job2/x");
        assert_eq!(j2.get("k").unwrap(), b"2");
        assert_eq!(j1.add("n", 1).unwrap(), 1);
        assert!(j1.check(&["k", "n"]).unwrap() && !j2.check(&["n"]).unwrap());
        assert!(j2.get("n").unwrap_err().to_string().contains("'job2/n'"));
    }

    #[test]
    fn unbounded_timeouts_do_not_overflow() {
        let s = server();
        let addr = s.local_connect_addr().to_string();
        let c = TcpStore::connect(&addr, Duration::MAX).unwrap();
        c.set("k", b"v").unwrap();
        assert_eq!(c.get("k").unwrap(), b"v");
        let d = temp_dir("max");
        let f = FileStore::new(&d, Duration::MAX).unwrap();
        f.set("k", b"v").unwrap();
        assert_eq!(f.get("k").unwrap(), b"v");
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn escaped_keys_are_distinct_file_names() {
        let keys = ["a/b", "a%2Fb", "a.b", ".lock", "", "%", "a b"];
        let names: std::collections::HashSet<_> = keys.iter().map(|k| escape_key(k)).collect();
        assert_eq!(names.len(), keys.len());
        assert!(names
            .iter()
            .all(|n| !n.contains('.') && !n.contains('/') && !n.is_empty()));
    }
}
