//! Key-value stores used during rendezvous: ranks publish addresses, segment
//! names and host ids here and block until their peers' entries appear.
//!
//! * [`TcpStoreServer`] / [`TcpStore`]: one process (usually rank 0) serves,
//!   everyone connects. Works across hosts. Every connection first proves
//!   that it holds the job secret ([`tcp::handshake`]); strangers are dropped.
//! * [`FileStore`]: a directory on a file system every rank can see (a shared
//!   NFS/Lustre mount, or `/tmp` for one host). Needs no open port; file
//!   permissions keep other users out.
//! * [`MemStore`]: the threads of one process, in its memory.
//! * [`Store`]: the TCP or the file store behind one type.
//! * [`ScopedStore`]: a view that prefixes every key, so several jobs (or
//!   several initialisations of one job) share one store without colliding.
//!
//! All of them implement [`KvStore`] (counters are decimal ASCII, as in
//! torch's TCPStore). The TCP store's wire protocol is described in [`tcp`].

mod file;
mod mem;
mod scoped;
pub mod tcp;

use std::io;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::KvStore;

pub use file::FileStore;
pub use mem::MemStore;
pub use scoped::ScopedStore;
pub use tcp::{handshake, is_disconnect, TcpStore, TcpStoreServer};

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
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "key '{key}' holds {:?}, not an integer counter",
                        String::from_utf8_lossy(v)
                    ),
                )
            }),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another thread holding the lock leaves the data consistent
    // for our simple maps, so keep serving instead of propagating the poison.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ---------------------------------------------------------------------------
// One type for either store

/// Either kind of store, so the rendezvous can hold whichever the
/// environment names in one type.
pub enum Store {
    Tcp(TcpStore),
    File(FileStore),
}

impl Store {
    fn inner(&self) -> &dyn KvStore {
        match self {
            Store::Tcp(s) => s,
            Store::File(s) => s,
        }
    }
}

impl KvStore for Store {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        self.inner().set(key, value)
    }

    fn get(&self, key: &str) -> io::Result<Vec<u8>> {
        self.inner().get(key)
    }

    fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        self.inner().add(key, delta)
    }

    fn check(&self, keys: &[&str]) -> io::Result<bool> {
        self.inner().check(keys)
    }

    fn delete(&self, key: &str) -> io::Result<bool> {
        self.inner().delete(key)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::auth::Key;
    use crate::secret::{JobSecret, SecretSource};
    use std::fs;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
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

    pub(crate) const SECRET: &str = "the store tests' job secret";

    pub(crate) fn server() -> TcpStoreServer {
        server_with(StoreLimits::default())
    }

    pub(crate) fn server_with(limits: StoreLimits) -> TcpStoreServer {
        TcpStoreServer::start("127.0.0.1:0", &secret(SECRET), limits).unwrap()
    }

    pub(crate) fn connect(
        s: &TcpStoreServer,
        material: &str,
        timeout_ms: u64,
    ) -> io::Result<TcpStore> {
        let addr = s.local_connect_addr().to_string();
        let limits = StoreLimits::default();
        TcpStore::connect(
            &addr,
            &secret(material),
            &limits,
            Duration::from_millis(timeout_ms),
        )
    }

    pub(crate) fn client(s: &TcpStoreServer, timeout_ms: u64) -> TcpStore {
        connect(s, SECRET, timeout_ms).unwrap()
    }

    /// The same behaviour checks for every store kind.
    fn check_basic(a: &dyn KvStore, b: &dyn KvStore) {
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

    fn check_blocking_get<S: KvStore + 'static>(a: Arc<S>, b: Arc<S>) {
        let t = thread::spawn(move || b.get("late").unwrap());
        thread::sleep(Duration::from_millis(100));
        a.set("late", b"here").unwrap();
        assert_eq!(t.join().unwrap(), b"here");
    }

    fn check_timeout(s: &dyn KvStore, timeout_ms: u64) {
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

    pub(crate) fn check_concurrent_add<S: KvStore + 'static>(stores: Vec<Arc<S>>) {
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
    fn memory_store_behaves_like_the_others() {
        let m = Arc::new(MemStore::with_timeout(Duration::from_millis(300)));
        check_basic(&*m, &*m);
        check_blocking_get(m.clone(), m.clone());
        check_timeout(&*m, 300);
        check_concurrent_add(vec![m.clone(), m.clone(), m]);
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
    fn file_add_from_many_threads() {
        let (d, a, b) = file_pair(5000);
        let (a, b) = (Arc::new(a), Arc::new(b));
        check_concurrent_add(vec![a.clone(), a.clone(), b.clone(), b]);
        fs::remove_dir_all(d).unwrap();
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
