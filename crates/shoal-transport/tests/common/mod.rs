//! Test helpers: in-memory and file-backed key-value stores, rank runners,
//! and blocking send/receive wrappers with timeouts.
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use shoal_bootstrap::store::{FileStore, MemStore};
use shoal_transport::*;

/// A store in a directory, shared by processes: shoal's own file store.
pub fn file_store(dir: impl AsRef<Path>) -> FileStore {
    FileStore::new(dir, Duration::from_secs(30)).unwrap()
}

/// The transport key every rank of the test jobs holds.
pub fn test_key() -> auth::Key {
    auth::Key::from_material(b"the transport key of shoal's tests")
}

pub fn job_id(name: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "t{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Shm,
    Tcp,
    Ucx,
}

/// Why the UCX tests cannot run here (`libucp` missing), or `None`.
pub fn ucx_missing() -> Option<String> {
    shoal_transport::ucx::probe_library(shoal_transport::ucx::DEFAULT_LIB)
        .err()
        .map(|e| e.to_string())
}

pub const TIMEOUT: Duration = Duration::from_secs(20);

/// A transport's configuration, which a test may adjust before it connects.
pub enum Config {
    Shm(ShmConfig),
    Tcp(TcpConfig),
    Ucx(UcxConfig),
}

/// The transport of `rank` in a job of `world` ranks on one host, with its
/// configuration first adjusted by `adjust`.
pub fn build_with(
    kind: Kind,
    rank: usize,
    world: usize,
    job: &str,
    store: &dyn KvStore,
    adjust: &dyn Fn(&mut Config),
) -> Box<dyn Transport> {
    let ranks: Vec<usize> = (0..world).collect();
    let mut config = match kind {
        Kind::Shm => Config::Shm(ShmConfig::new(rank, world, ranks, job)),
        Kind::Tcp => Config::Tcp(TcpConfig::new(rank, world, ranks, job, test_key())),
        Kind::Ucx => {
            let mut c = UcxConfig::new(rank, world, ranks.clone(), job);
            c.local_ranks = ranks;
            Config::Ucx(c)
        }
    };
    adjust(&mut config);
    match config {
        Config::Shm(c) => Box::new(ShmTransport::connect(&c, store).unwrap()),
        Config::Tcp(c) => Box::new(TcpTransport::connect(&c, store).unwrap()),
        Config::Ucx(c) => Box::new(UcxTransport::connect(&c, store).unwrap()),
    }
}

/// [`build_with`] with a shared-memory ring of `ring` bytes.
pub fn build(
    kind: Kind,
    rank: usize,
    world: usize,
    job: &str,
    ring: usize,
    store: &dyn KvStore,
) -> Box<dyn Transport> {
    build_with(kind, rank, world, job, store, &ring_size(ring))
}

fn ring_size(ring: usize) -> impl Fn(&mut Config) + Send + Sync + 'static {
    move |c: &mut Config| {
        if let Config::Shm(c) = c {
            c.ring_size = ring;
        }
    }
}

/// Runs `body(rank, transport)` on `world` threads, each with its own
/// transport, configured as `adjust` says.
pub fn run_with<A, F>(kind: Kind, world: usize, adjust: A, body: F)
where
    A: Fn(&mut Config) + Send + Sync + 'static,
    F: Fn(usize, &dyn Transport) + Send + Sync + 'static,
{
    let store = Arc::new(MemStore::default());
    let job = job_id("run");
    let (adjust, body) = (Arc::new(adjust), Arc::new(body));
    let handles: Vec<_> = (0..world)
        .map(|r| {
            let (store, job) = (store.clone(), job.clone());
            let (adjust, body) = (adjust.clone(), body.clone());
            std::thread::spawn(move || {
                let t = build_with(kind, r, world, &job, &*store, &*adjust);
                body(r, &*t);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Runs `body(rank, transport)` on `world` threads, each with its own
/// transport (a shared-memory ring of `ring` bytes).
pub fn run<F>(kind: Kind, world: usize, ring: usize, body: F)
where
    F: Fn(usize, &dyn Transport) + Send + Sync + 'static,
{
    run_with(kind, world, ring_size(ring), body)
}

pub fn tag(step: u32) -> Tag {
    Tag {
        comm: 1,
        seq: 7,
        step,
    }
}

pub fn sig() -> CallSig {
    CallSig {
        kind: 1,
        dtype: 2,
        op: 0,
        algo: 0,
        root: 0,
        count: 100,
        history: 0,
    }
}

pub fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + seed * 7) % 251) as u8)
        .collect()
}

/// Waits until every request completes; panics after `TIMEOUT`.
pub fn wait_all(t: &dyn Transport, reqs: &[ReqId]) -> Result<()> {
    let deadline = Instant::now() + TIMEOUT;
    let mut left: Vec<ReqId> = reqs.to_vec();
    while !left.is_empty() {
        let mut still = Vec::new();
        for r in left {
            if !t.test(r)? {
                still.push(r);
            }
        }
        left = still;
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "timed out");
        t.wait(Duration::from_millis(50))?;
    }
    Ok(())
}

pub fn isend(t: &dyn Transport, peer: usize, step: u32, data: &[u8]) -> ReqId {
    unsafe {
        t.isend(
            peer,
            tag(step),
            sig(),
            data.as_ptr(),
            data.len(),
            data.len(),
        )
        .unwrap()
    }
}

pub fn irecv(t: &dyn Transport, peer: usize, step: u32, buf: &mut [u8]) -> ReqId {
    let into = RecvInto::Buffer {
        dst: buf.as_mut_ptr(),
        len: buf.len(),
    };
    unsafe { t.irecv(peer, tag(step), sig(), into).unwrap() }
}

/// Sends `bufs` to `peer` all at once, as steps `first`, `first + 1`, ...,
/// and waits for every send.
pub fn send_all(t: &dyn Transport, peer: usize, first: u32, bufs: &[Vec<u8>]) {
    let reqs: Vec<ReqId> = bufs
        .iter()
        .enumerate()
        .map(|(k, b)| isend(t, peer, first + k as u32, b))
        .collect();
    wait_all(t, &reqs).unwrap();
}

pub fn send(t: &dyn Transport, peer: usize, step: u32, data: &[u8]) {
    wait_all(t, &[isend(t, peer, step, data)]).unwrap();
}

pub fn recv(t: &dyn Transport, peer: usize, step: u32, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    wait_all(t, &[irecv(t, peer, step, &mut buf)]).unwrap();
    buf
}

/// Waits until a transport call fails; returns the error.
pub fn wait_error(t: &dyn Transport, req: ReqId, within: Duration) -> TransportError {
    let deadline = Instant::now() + within;
    loop {
        match t.test(req) {
            Err(e) => return e,
            Ok(true) => panic!("request completed unexpectedly"),
            Ok(false) => {}
        }
        if let Err(e) = t.wait(Duration::from_millis(20)) {
            return e;
        }
        assert!(Instant::now() < deadline, "no error within {within:?}");
    }
}
