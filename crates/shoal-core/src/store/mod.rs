//! Key-value stores used during rendezvous: ranks publish addresses, segment
//! names and host ids here and block until their peers' entries appear.
//!
//! * [`TcpStoreServer`] / [`TcpStore`]: one process (usually rank 0) serves,
//!   everyone connects. Works across hosts. Every connection first proves
//!   that it holds the job secret ([`handshake`]); strangers are dropped.
//! * [`FileStore`]: a directory on a file system every rank can see (a shared
//!   NFS/Lustre mount, or `/tmp` for one host). Needs no open port; file
//!   permissions keep other users out.
//! * [`Store`]: either of the two behind one type, so callers can `add`.
//! * [`ScopedStore`]: a view that prefixes every key, so several jobs (or
//!   several initialisations of one job) share one store without colliding.
//!
//! Counters written by `add` are stored as decimal ASCII, so `get` on a
//! counter key returns e.g. `b"3"` (the convention of torch's TCPStore).
//!
//! # Wire protocol of the TCP store
//!
//! A connection starts with the handshake of [`handshake`] (bytes in
//! docs/security.md). Then every request is one message and gets exactly one
//! reply, in order, on the same connection. Integers are little-endian.
//! `bytes` is `len: u32` followed by `len` bytes; keys are UTF-8.
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
//! waiting client costs no polling traffic. A request the server cannot
//! accept (unknown op, a key over 4 KiB, a value over `SHOAL_STORE_MAX_VALUE`,
//! invalid UTF-8) is answered with ERROR naming the problem, and that
//! connection is closed. A server that stops closes its connections without
//! replying, so a waiting client learns that the store went away.

mod client;
mod file;
pub mod handshake;
mod server;
mod wire;

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use shoal_transport::KvStore;

pub use client::{is_disconnect, TcpStore};
pub use file::FileStore;
pub use server::TcpStoreServer;

/// `SHOAL_STORE_MAX_VALUE` when unset: far above shoal's own values (the
/// largest, the host list, is about 64 bytes per rank), far below what
/// would strain rank 0's memory.
pub const DEFAULT_MAX_VALUE: usize = 64 << 20;

/// What the TCP store allows the ranks that connect to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLimits {
    /// Largest value a SET may carry (`SHOAL_STORE_MAX_VALUE`).
    pub max_value: usize,
    /// Most authenticated connections served at once (each has a thread).
    pub max_connections: usize,
}

impl Default for StoreLimits {
    fn default() -> StoreLimits {
        StoreLimits {
            max_value: DEFAULT_MAX_VALUE,
            max_connections: 1024,
        }
    }
}

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

/// Parses a counter value; a missing key counts as 0.
fn parse_counter(key: &str, value: Option<&[u8]>) -> io::Result<i64> {
    match value {
        None => Ok(0),
        Some(v) => std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| {
                wire::invalid(format!(
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
    use crate::secret::{JobSecret, SecretSource};
    use shoal_transport::auth::Key;
    use std::fs;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::thread;

    pub(crate) fn secret(material: &str) -> JobSecret {
        JobSecret {
            key: Key::from_material(material.as_bytes()),
            source: SecretSource::Env,
        }
    }

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

    const SECRET: &str = "the store tests' job secret";

    fn server() -> TcpStoreServer {
        server_with(StoreLimits::default())
    }

    fn server_with(limits: StoreLimits) -> TcpStoreServer {
        TcpStoreServer::start("127.0.0.1:0", &secret(SECRET), limits).unwrap()
    }

    fn connect(s: &TcpStoreServer, material: &str, timeout_ms: u64) -> io::Result<TcpStore> {
        let addr = s.local_connect_addr().to_string();
        let limits = StoreLimits::default();
        TcpStore::connect(
            &addr,
            &secret(material),
            &limits,
            Duration::from_millis(timeout_ms),
        )
    }

    fn client(s: &TcpStoreServer, timeout_ms: u64) -> TcpStore {
        connect(s, SECRET, timeout_ms).unwrap()
    }

    /// A raw connection that has passed the handshake, for sending bytes by hand.
    fn raw_member(s: &TcpStoreServer) -> TcpStream {
        let mut raw = TcpStream::connect(s.local_connect_addr()).unwrap();
        handshake::client(&mut raw, &secret(SECRET).key.derive("store")).unwrap();
        raw
    }

    /// Reads one reply that must be ERROR; returns its message.
    fn error_reply(raw: &mut TcpStream) -> String {
        assert_eq!(wire::read_u8(raw).unwrap(), wire::ST_ERROR);
        let n = wire::read_u32(raw).unwrap() as usize;
        let mut msg = vec![0u8; n];
        raw.read_exact(&mut msg).unwrap();
        String::from_utf8(msg).unwrap()
    }

    /// Whether the server closed `raw` without sending anything.
    fn closed_unanswered(raw: &mut TcpStream) -> bool {
        raw.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 1];
        match raw.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
        }
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
            let limits = StoreLimits::default();
            let c = TcpStore::connect(&a2, &secret(SECRET), &limits, Duration::from_secs(10));
            c.unwrap().get("hello").unwrap()
        });
        thread::sleep(Duration::from_millis(300));
        let s = TcpStoreServer::start(&addr, &secret(SECRET), StoreLimits::default()).unwrap();
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
        let limits = StoreLimits::default();
        let e = TcpStore::connect(&addr, &secret(SECRET), &limits, Duration::from_millis(200))
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
        // A member that leaves mid-request.
        let mut raw = raw_member(&s);
        raw.write_all(&[wire::OP_SET, 10, 0]).unwrap();
        drop(raw);
        // An unknown op, and a length field over the limit, are answered with
        // ERROR naming the problem (nothing is allocated), then closed.
        let mut raw = raw_member(&s);
        raw.write_all(&[99, 1, 2, 3]).unwrap();
        assert_eq!(error_reply(&mut raw), "unknown op 99");
        assert!(closed_unanswered(&mut raw));
        let mut raw = raw_member(&s);
        raw.write_all(&[wire::OP_SET, 0xff, 0xff, 0xff, 0xff])
            .unwrap();
        assert!(error_reply(&mut raw).contains("key of 4294967295 bytes exceeds the limit of 4096"));
        // A member that disconnects while blocked in GET.
        let c = client(&s, 5000);
        let mut raw = raw_member(&s);
        let mut req = vec![wire::OP_GET];
        wire::put_bytes(&mut req, b"nothing");
        req.extend_from_slice(&200u64.to_le_bytes());
        raw.write_all(&req).unwrap();
        drop(raw);
        // A stranger speaking the protocol without the handshake.
        let mut raw = TcpStream::connect(addr).unwrap();
        raw.write_all(&req).unwrap();
        assert!(closed_unanswered(&mut raw));
        c.set("still", b"alive").unwrap();
        assert_eq!(c.get("still").unwrap(), b"alive");
    }

    #[test]
    fn a_wrong_secret_is_refused_with_a_clear_error() {
        let s = server();
        let e = connect(&s, "another job's secret", 2000).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        let msg = e.to_string();
        assert!(
            msg.contains("refused this rank's job secret (from SHOAL_SECRET)")
                && msg.contains("every rank must hold the same job secret"),
            "{msg}"
        );
        client(&s, 2000).set("k", b"v").unwrap();
    }

    #[test]
    fn a_store_of_another_secret_is_never_talked_to() {
        // A client that reaches a server holding another secret stops at the
        // server's refusal; the server's map never sees the request.
        let s = server();
        let stranger =
            TcpStoreServer::start("127.0.0.1:0", &secret("other"), StoreLimits::default()).unwrap();
        let addr = stranger.local_connect_addr().to_string();
        let limits = StoreLimits::default();
        let e = TcpStore::connect(&addr, &secret(SECRET), &limits, Duration::from_secs(2));
        assert!(e.is_err());
        assert!(!client(&s, 2000).check(&["k"]).unwrap());
    }

    #[test]
    fn connections_beyond_the_limit_are_refused() {
        let s = server_with(StoreLimits {
            max_connections: 2,
            ..StoreLimits::default()
        });
        let (a, b) = (client(&s, 2000), client(&s, 2000));
        let msg = connect(&s, SECRET, 2000).err().unwrap().to_string();
        assert!(msg.contains("already serves as many as it allows"), "{msg}");
        drop(a);
        // The server notices the closed connection; then there is room again.
        let deadline = Instant::now() + Duration::from_secs(5);
        let c = loop {
            match connect(&s, SECRET, 2000) {
                Ok(c) => break c,
                Err(e) => assert!(Instant::now() < deadline, "{e}"),
            }
            thread::sleep(Duration::from_millis(20));
        };
        c.set("k", b"v").unwrap();
        assert_eq!(b.get("k").unwrap(), b"v");
    }

    #[test]
    fn oversized_values_are_refused_on_both_sides() {
        let small = StoreLimits {
            max_value: 100,
            ..StoreLimits::default()
        };
        let s = server_with(small);
        // The server refuses by the length field, before reading the value.
        let big = client(&s, 2000);
        let e = big.set("k", &[0u8; 101]).unwrap_err().to_string();
        assert!(
            e.contains("exceeds SHOAL_STORE_MAX_VALUE=100 of this store"),
            "{e}"
        );
        big.set("k", &[0u8; 100]).unwrap(); // reconnects
                                            // A client checks its own limit before sending.
        let addr = s.local_connect_addr().to_string();
        let c = TcpStore::connect(&addr, &secret(SECRET), &small, Duration::from_secs(2)).unwrap();
        let e = c.set("k", &[0u8; 101]).unwrap_err().to_string();
        assert!(
            e.contains("101 bytes exceeds SHOAL_STORE_MAX_VALUE=100"),
            "{e}"
        );
        assert_eq!(c.get("k").unwrap().len(), 100);
    }

    #[test]
    fn a_refused_request_closes_the_connection_at_once() {
        // The sender of an oversized value must not be left writing into a
        // connection nobody reads: the server closes it when it refuses.
        let s = server_with(StoreLimits {
            max_value: 100,
            ..StoreLimits::default()
        });
        let mut raw = raw_member(&s);
        raw.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut header = vec![wire::OP_SET];
        wire::put_bytes(&mut header, b"k");
        header.extend_from_slice(&(64u32 << 20).to_le_bytes());
        raw.write_all(&header).unwrap();
        let t0 = Instant::now();
        let e = raw.write_all(&vec![0u8; 64 << 20]).unwrap_err();
        assert!(is_disconnect(&e), "{e:?} after {:?}", t0.elapsed());
    }

    #[test]
    fn idle_strangers_do_not_lock_members_out() {
        let s = server();
        let addr = s.local_connect_addr();
        let idle: Vec<TcpStream> = (0..300)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let t0 = Instant::now();
        let c = client(&s, 5000);
        c.set("in", b"yes").unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        drop(idle);
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
        let e = t.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("closed the connection; did rank 0 exit?"), "{e}");
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
        let limits = StoreLimits::default();
        let c = TcpStore::connect(&addr, &secret(SECRET), &limits, Duration::MAX).unwrap();
        c.set("k", b"v").unwrap();
        assert_eq!(c.get("k").unwrap(), b"v");
        let d = temp_dir("max");
        let f = FileStore::new(&d, Duration::MAX).unwrap();
        f.set("k", b"v").unwrap();
        assert_eq!(f.get("k").unwrap(), b"v");
        fs::remove_dir_all(d).unwrap();
    }
}
