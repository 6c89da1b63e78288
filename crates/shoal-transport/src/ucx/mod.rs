//! UCX transport: shoal's messages over UCP's tagged API, so one transport
//! reaches InfiniBand, RoCE, shared memory and TCP (whatever `UCX_TLS`
//! allows and the machine has).
//!
//! UCP is loaded at run time ([`ffi`]); without `libucp` only building this
//! transport fails, with an error naming the package to install.
//!
//! Every rank creates one single-threaded UCP worker, publishes its address
//! (and its pid) in the job's store, and opens an endpoint to every peer in
//! error-handling mode *peer*, so UCX reports a peer that died or became
//! unreachable on that endpoint instead of hanging.
//!
//! A message travels as shoal's usual 64-byte frame header ([`crate::frame`],
//! with the tag and call signature that matching checks), sent as a UCX
//! tagged message in the *control* class. A small message (below
//! [`UcxConfig::rndv_bytes`]) rides in the same UCX message as its header; a
//! larger collective message sends a `Rndv` header naming a payload id, and
//! its payload as a separate UCX message tagged with that id. The receiver
//! takes every control message out of UCX as soon as it arrives (probe,
//! then receive into the heap), so a sender never waits on the receiver's
//! matching; it matches headers with [`crate::matching::Matcher`] exactly as
//! shm and tcp do (mismatches, lengths, finished calls, blocked calls). A
//! `Rndv` header goes the matcher's pull path, as shm's rendezvous does:
//! its payload stays inside UCX until the header meets a posted receive
//! (on arrival, or when `irecv` posts it), and is then received straight
//! into that receive's buffer, so an early payload costs no heap copy.
//! The sender's send completes only then, which plans allow (the verifier
//! runs them under rendezvous semantics). UCX moves large payloads by its
//! rendezvous protocol: zero-copy
//! (RDMA, CMA) with no staging copy in shoal. Standalone point-to-point
//! sends ride inline while they fit the flow-control credit (as on shm, so
//! two ranks that both send first do not wait for each other); a message
//! beyond the credit ([`crate::flow`]) takes the rendezvous path, its
//! payload sent synchronously so UCX does not deliver it early either.
//!
//! UCX tag layout: bit 63 the class (0 control, 1 payload), bits 32..62 the
//! sender's rank, bits 0..31 the payload id.
//!
//! Peers die two ways: UCX's endpoint error callback (a broken connection,
//! or its keepalive) and, for ranks on this host, a pid check every 50 ms
//! (UCX's shared-memory keepalive is slower). Abort and bye are control
//! frames, as on tcp. `wait` polls: UCX progresses only when the worker is
//! driven, so it polls while UCX is moving a message's fragments and
//! briefly after, then sleeps on the worker's event fd (UCX's wakeup
//! feature), which a peer's message or reply makes readable; a UCX without
//! one gets short naps ([`NAP`]) instead.

mod engine;
mod ffi;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::doorbell::{wait_on_napping, Doorbell, Spin};
use crate::frame::{waiting, Header, Kind, RndvInfo, HEADER_LEN};
use crate::matching::Matcher;
use crate::setup::wait_for_rank;
use crate::{
    Answer, Blocked, CallSig, KvStore, RecvInto, ReqId, Result, Tag, Transport, TransportError,
};
use engine::{on_ep_error, ErrArg, ErrList, Inner, Peer};
use ffi::{
    ErrHandler, Ucp, UCP_ERR_HANDLING_MODE_NONE, UCP_ERR_HANDLING_MODE_PEER, UCS_ERR_BUSY, UCS_OK,
};

pub use ffi::{UcxError, DEFAULT_LIB};

/// Collective messages of at least this many bytes send their payload as
/// a separate UCX message received straight into the posted buffer.
pub const DEFAULT_RNDV_BYTES: usize = 64 << 10;
/// Longest sleep of `wait` between polls of the worker, where UCX gives
/// no event fd to sleep on.
pub const NAP: Duration = Duration::from_micros(200);
/// How long `wait` polls (yielding in between) before it sleeps on the
/// worker's event fd: a peer's reply within this long is caught without
/// the cost of arming and waking.
const SPIN: Duration = Duration::from_micros(200);
/// Longest sleep on the event fd: UCX raises no event for a local peer
/// that died, so the pid checks of `poll` need a poll this often.
const EVENT_NAP: Duration = Duration::from_millis(10);

/// UCX settings shoal picks when some peer is on another host, unless the
/// user set a `UCX_*` variable of the same name (that always wins).
///
/// `PROTO_ENABLE=y`: UCX's second protocol layer (newer UCX releases'
/// default). Under UCX 1.13's first layer, rendezvous over its tcp
/// transport moves exactly half of a 1 Gb/s link while both directions
/// carry payloads (an allreduce); the second keeps the link full both
/// ways. Between ranks of one host the first layer stays: there its
/// rendezvous reads the sender's memory with CMA (zero-copy), where 1.13's
/// second layer copies through the shared-memory FIFO (docs/benchmarks.md,
/// issue 17). The layer is a context-wide setting, so a job with peers on
/// this host and on others uses the second for all of them.
const NETWORK_SETTINGS: &[(&str, &str)] = &[("PROTO_ENABLE", "y")];

/// The UCX settings for a rank with `cfg`'s peers (see [`NETWORK_SETTINGS`]).
fn settings_for(cfg: &UcxConfig) -> &'static [(&'static str, &'static str)] {
    let remote = cfg
        .peers
        .iter()
        .any(|r| *r != cfg.rank && !cfg.local_ranks.contains(r));
    if remote {
        NETWORK_SETTINGS
    } else {
        &[]
    }
}

const CLASS_PAYLOAD: u64 = 1 << 63;
const SENDER_MASK: u64 = 0x7fff_ffff << 32;

fn ctl_tag(rank: usize) -> u64 {
    (rank as u64) << 32
}

fn payload_tag(rank: usize, id: u32) -> u64 {
    CLASS_PAYLOAD | ((rank as u64) << 32) | id as u64
}

fn sender_of(tag: u64) -> usize {
    ((tag & SENDER_MASK) >> 32) as usize
}

/// Settings of a [`UcxTransport`].
#[derive(Clone, Debug)]
pub struct UcxConfig {
    pub rank: usize,
    pub world: usize,
    /// The ranks this transport connects to (besides `rank`).
    pub peers: Vec<usize>,
    /// Ranks on this host, whose pids are watched.
    pub local_ranks: Vec<usize>,
    /// Unique per job; names store keys.
    pub job_id: String,
    /// Limit for setup (the store's) and for flushing sends on close.
    pub timeout: Duration,
    /// The UCP library to load (`SHOAL_UCX_LIB`).
    pub lib: String,
    /// See [`DEFAULT_RNDV_BYTES`].
    pub rndv_bytes: usize,
    /// Bytes of one peer's messages this rank holds before their receives
    /// are posted (the flow-control window, [`crate::flow`]).
    pub unexpected_bytes: usize,
}

impl UcxConfig {
    pub fn new(rank: usize, world: usize, peers: Vec<usize>, job_id: &str) -> UcxConfig {
        UcxConfig {
            rank,
            world,
            peers,
            local_ranks: vec![rank],
            job_id: job_id.to_string(),
            timeout: Duration::from_secs(60),
            lib: DEFAULT_LIB.to_string(),
            rndv_bytes: DEFAULT_RNDV_BYTES,
            unexpected_bytes: crate::flow::DEFAULT_WINDOW,
        }
    }
}

/// Loads `path` and reports its UCX version, or why it cannot be used.
pub fn probe_library(path: &str) -> std::result::Result<(u32, u32, u32), UcxError> {
    Ucp::load(path).map(|u| u.version)
}

/// The UCX transport; see the module docs.
pub struct UcxTransport {
    rank: usize,
    world: usize,
    timeout: Duration,
    rndv_bytes: usize,
    bell: Doorbell,
    /// The worker's event fd (see [`UcxTransport::wait_on_events`]); none
    /// if this UCX gives none, and `wait` naps instead.
    event_fd: Option<i32>,
    ucp: Arc<Ucp>,
    ctx: ffi::Context,
    inner: Mutex<Inner>,
}

// SAFETY: the context is only cleaned up in `Drop`; everything else UCX
// lives in `inner`, behind its mutex.
unsafe impl Send for UcxTransport {}
unsafe impl Sync for UcxTransport {}

impl UcxTransport {
    /// Loads UCP, creates this rank's worker, publishes its address, and
    /// opens an endpoint to every peer (blocking on `store` until each has
    /// published).
    pub fn connect(cfg: &UcxConfig, store: &dyn KvStore) -> Result<UcxTransport> {
        let ucp = Arc::new(Ucp::load(&cfg.lib)?);
        let ctx = ucp.init(settings_for(cfg), cfg.peers.len())?;
        let built = Self::build(cfg, store, &ucp, ctx);
        if built.is_err() {
            // SAFETY: nothing else holds the context (the worker, if any,
            // was destroyed by `build`).
            unsafe { (ucp.cleanup)(ctx) };
        }
        let mut inner = built?;
        if let Err(e) = inner.wire_up(store, &cfg.job_id, &cfg.peers, cfg.timeout) {
            inner.shut_down();
            // SAFETY: the endpoints are closed; nothing uses these again.
            unsafe {
                (ucp.worker_destroy)(inner.worker);
                (ucp.cleanup)(ctx);
            }
            return Err(e);
        }
        let event_fd = ucp
            .event_fd(inner.worker)
            .map_err(|e| tracing::debug!("{e}; wait naps instead"))
            .ok();
        Ok(UcxTransport {
            rank: cfg.rank,
            world: cfg.world,
            timeout: cfg.timeout,
            rndv_bytes: cfg.rndv_bytes.max(1),
            bell: Doorbell::new(),
            event_fd,
            ucp,
            ctx,
            inner: Mutex::new(inner),
        })
    }

    fn build(
        cfg: &UcxConfig,
        store: &dyn KvStore,
        ucp: &Arc<Ucp>,
        ctx: ffi::Context,
    ) -> Result<Inner> {
        let worker = ucp.worker(ctx)?;
        let key = |r: usize| format!("{}/ucx/{r}", cfg.job_id);
        let connected = (|| {
            let mut record = std::process::id().to_le_bytes().to_vec();
            record.extend(ucp.address(worker)?);
            store
                .set(&key(cfg.rank), &record)
                .map_err(|e| io_err(&format!("publishing the worker address: store: {e}")))?;
            let errs: ErrList = Arc::default();
            let mut peers: Vec<Option<Peer>> = (0..cfg.world).map(|_| None).collect();
            for &r in cfg
                .peers
                .iter()
                .filter(|&&r| r != cfg.rank && r < cfg.world)
            {
                let record = wait_for_rank(store, &key(r), r)?;
                if record.len() <= 4 {
                    return Err(io_err(&format!("rank {r} published a malformed address")));
                }
                let pid = i32::from_le_bytes(record[..4].try_into().unwrap());
                let arg = Box::new(ErrArg {
                    peer: r,
                    errs: errs.clone(),
                    ucp: ucp.clone(),
                });
                let handler = ErrHandler {
                    cb: Some(on_ep_error),
                    arg: &*arg as *const ErrArg as *mut _,
                };
                let local = cfg.local_ranks.contains(&r);
                let ep = connect_peer(ucp, worker, &record[4..], handler, local)
                    .map_err(|e| io_err(&format!("connecting to rank {r}: {e}")))?;
                peers[r] = Some(Peer {
                    ep: Some(ep),
                    local_pid: local.then_some(pid),
                    _err_arg: arg,
                });
            }
            let mut matcher = Matcher::new(cfg.rank, cfg.peers.iter().copied());
            matcher.limit_unexpected(cfg.unexpected_bytes);
            matcher.keep_buffers(engine::KEPT_BUFFER_BYTES);
            matcher.rndv_outlives_bye();
            Ok(Inner::new(
                ucp.clone(),
                worker,
                cfg.rank,
                matcher,
                peers,
                errs,
            ))
        })();
        if connected.is_err() {
            // SAFETY: no endpoint survives a failed setup (dropping the
            // partial peer list leaks their endpoints to the worker, which
            // destroys them).
            unsafe { (ucp.worker_destroy)(worker) };
        }
        connected
    }

    /// Whether `peer` is reached through this transport.
    pub fn reaches(&self, peer: usize) -> bool {
        self.lock().peers.get(peer).is_some_and(|p| p.is_some())
    }

    /// Whether UCX was moving data at the last poll (see `Inner::busy`).
    pub fn busy(&self) -> bool {
        self.lock().busy
    }

    /// The UCX version in use.
    pub fn version(&self) -> (u32, u32, u32) {
        self.ucp.version
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn poll(&self) -> Result<bool> {
        let mut g = self.lock();
        let changed = g.poll();
        g.matcher.health()?;
        Ok(changed)
    }

    /// `Transport::wait` on the worker's event fd: poll while UCX is busy or
    /// for [`SPIN`], then arm the worker and sleep until UCX has an event
    /// (a peer's message or reply wakes this rank at once, where a fixed
    /// nap would add up to its length to every step of a collective).
    fn wait_on_events(&self, fd: i32, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            if self.poll()? {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            if self.busy() || now - start < SPIN {
                std::thread::yield_now();
                continue;
            }
            let armed = {
                let g = self.lock();
                // SAFETY: a live worker, used under the mutex.
                unsafe { self.ucp.arm(g.worker) }
            };
            match armed {
                UCS_OK => sleep_on_fd(fd, (deadline - now).min(EVENT_NAP)),
                UCS_ERR_BUSY => continue,
                // Arming failed: nap as without an event fd.
                _ => std::thread::sleep((deadline - now).min(NAP)),
            }
        }
    }

    /// Pushes pending sends, says bye to every peer, and closes the
    /// endpoints. Called by `Drop` too.
    pub fn close(&self) {
        if self.lock().closed {
            return;
        }
        let peers: Vec<usize> = (0..self.world).filter(|&p| self.reaches(p)).collect();
        {
            let mut g = self.lock();
            for p in peers {
                let bye = Header::control(Kind::Bye, 0).encode().to_vec();
                g.send_frame(p, bye, None);
            }
        }
        let deadline = Instant::now() + self.timeout.min(Duration::from_secs(10));
        loop {
            let mut g = self.lock();
            g.poll();
            if !g.sending() || Instant::now() >= deadline || g.matcher.health().is_err() {
                break;
            }
            drop(g);
            std::thread::sleep(Duration::from_micros(50));
        }
        self.lock().shut_down();
    }
}

impl Transport for UcxTransport {
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
        let mut g = self.lock();
        if g.closed {
            return Err(io_err("transport is closed"));
        }
        let id = g.matcher.add_send(peer)?;
        let collective = sig.is_collective();
        let large = len >= self.rndv_bytes && collective;
        let out_of_credit = !large && !g.matcher.may_send_eagerly(peer, len, collective);
        if large || out_of_credit {
            // The payload goes first, so its id is known for the header;
            // UCX keeps it (or, for rendezvous, its descriptor) until the
            // receiver posts the receive the header leads to.
            let pid = g.send_payload(peer, data, len, id, out_of_credit);
            let info = RndvInfo {
                word: 0,
                cookie: pid as u64,
            };
            g.send_frame(
                peer,
                info.encode(&Header::rndv(tag, sig, len)).to_vec(),
                None,
            );
        } else {
            let mut frame = Vec::with_capacity(HEADER_LEN + len);
            frame.extend_from_slice(&Header::data(tag, sig, len).encode());
            if len > 0 {
                // SAFETY: the caller guarantees `data[..len]` is valid.
                frame.extend_from_slice(std::slice::from_raw_parts(data, len));
            }
            g.send_frame(peer, frame, Some(id));
        }
        Ok(id)
    }

    unsafe fn irecv(&self, peer: usize, tag: Tag, sig: CallSig, into: RecvInto) -> Result<ReqId> {
        let mut g = self.lock();
        let id = g.matcher.post_recv(peer, tag, sig, into)?;
        // A payload that arrived first is received now, straight into `into`.
        g.start_pulls();
        Ok(id)
    }

    fn probe(&self, from: &[(usize, Tag)]) -> Result<Option<usize>> {
        let mut g = self.lock();
        g.poll();
        Ok(g.matcher.probe(from))
    }

    fn test(&self, req: ReqId) -> Result<bool> {
        let mut g = self.lock();
        g.poll();
        g.matcher.test(req)
    }

    fn progress(&self) -> Result<bool> {
        self.poll()
    }

    fn wait(&self, timeout: Duration) -> Result<()> {
        match self.event_fd {
            Some(fd) => self.wait_on_events(fd, timeout),
            None => wait_busy(&self.bell, timeout, || self.poll(), || self.busy()),
        }
    }

    fn abort(&self, reason: &str) {
        let peers: Vec<usize> = (0..self.world).filter(|&p| self.reaches(p)).collect();
        let mut g = self.lock();
        g.matcher.set_fatal(TransportError::Aborted {
            peer: self.rank,
            reason: reason.to_string(),
        });
        let mut frame = Header::control(Kind::Abort, reason.len()).encode().to_vec();
        frame.extend_from_slice(reason.as_bytes());
        for p in peers {
            g.send_frame(p, frame.clone(), None);
        }
        // Push the frames out now: an aborting process may exit right after.
        let deadline = Instant::now() + Duration::from_millis(200);
        while g.sending() && Instant::now() < deadline {
            g.poll();
        }
    }

    fn finish_call(&self, comm: u32, seq: u32, sig: CallSig) -> Result<()> {
        self.lock().matcher.finish_call(comm, seq, sig)
    }

    fn set_blocked(&self, b: &Blocked) {
        let mut g = self.lock();
        g.matcher.set_blocked(b);
        let frame = waiting(Some(b));
        for &peer in &b.on {
            g.send_frame(peer, frame.to_vec(), None);
        }
    }

    fn ask(&self, peer: usize) -> Result<()> {
        let mut g = self.lock();
        g.matcher.forget_answer(peer);
        let query = Header::control(Kind::Query, 0).encode().to_vec();
        if !g.send_frame(peer, query, None) {
            return Err(io_err(&format!("rank {peer} is not reachable")));
        }
        Ok(())
    }

    fn answer(&self, peer: usize) -> Option<Answer> {
        self.lock().matcher.answer(peer)
    }
}

impl Drop for UcxTransport {
    fn drop(&mut self) {
        self.close();
        let worker = self.lock().worker;
        // SAFETY: the endpoints are closed and no request is left; nothing
        // uses the worker or the context after this.
        unsafe {
            (self.ucp.worker_destroy)(worker);
            (self.ucp.cleanup)(self.ctx);
        }
    }
}

/// `Transport::wait` for a side with UCX: as [`wait_on_napping`] with
/// [`NAP`], but while `busy` (UCX moving a message's fragments) it polls
/// without sleeping.
pub(crate) fn wait_busy(
    bell: &Doorbell,
    timeout: Duration,
    mut poll: impl FnMut() -> Result<bool>,
    busy: impl Fn() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if poll()? {
            return Ok(());
        }
        if !busy() {
            let left = deadline.saturating_duration_since(Instant::now());
            return wait_on_napping(bell, left, NAP, Spin::Yielding, poll);
        }
        if Instant::now() >= deadline {
            return Ok(());
        }
        std::thread::yield_now();
    }
}

/// Sleeps until `fd` is readable or `timeout` (rounded up to a millisecond)
/// passed.
fn sleep_on_fd(fd: i32, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd; an interrupted or failed poll just returns
    // early, and the caller polls the worker again either way.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// An endpoint to the worker at `address` that reports its peer's failure.
/// A rank of this host may also do without (its pid is watched instead):
/// a UCX whose shared-memory transports cannot report failures then still
/// connects over them.
fn connect_peer(
    ucp: &Ucp,
    worker: ffi::Worker,
    address: &[u8],
    handler: ErrHandler,
    local: bool,
) -> std::result::Result<ffi::Ep, UcxError> {
    let arg = handler.arg;
    // SAFETY: a live worker; the handler's argument is kept with the endpoint.
    let peer = unsafe { ucp.connect(worker, address, UCP_ERR_HANDLING_MODE_PEER, handler) };
    match peer {
        Err(e) if local => {
            tracing::debug!("ucx: {e}; connecting without peer-failure reports (pid watched)");
            let handler = ErrHandler {
                cb: Some(on_ep_error),
                arg,
            };
            // SAFETY: as above.
            unsafe { ucp.connect(worker, address, UCP_ERR_HANDLING_MODE_NONE, handler) }
        }
        other => other,
    }
}

impl From<UcxError> for TransportError {
    fn from(e: UcxError) -> TransportError {
        TransportError::Io(e.to_string())
    }
}

fn io_err(msg: &str) -> TransportError {
    TransportError::Io(format!("ucx: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_keep_class_sender_and_id_apart() {
        let t = payload_tag(0x1234, 0xdead_beef);
        assert_eq!(sender_of(t), 0x1234);
        assert_eq!(t & CLASS_PAYLOAD, CLASS_PAYLOAD);
        assert_eq!(t as u32, 0xdead_beef);
        let c = ctl_tag(7);
        assert_eq!(sender_of(c), 7);
        assert_eq!(c & CLASS_PAYLOAD, 0);
    }

    #[test]
    fn the_second_protocol_layer_only_with_a_peer_on_another_host() {
        let mut c = UcxConfig::new(0, 3, vec![0, 1, 2], "j");
        c.local_ranks = vec![0, 1, 2];
        assert!(settings_for(&c).is_empty());
        c.local_ranks = vec![0, 1];
        assert_eq!(settings_for(&c), &[("PROTO_ENABLE", "y")]);
        // Routed: UCX reaches only the other host's ranks.
        c.peers = vec![2];
        assert_eq!(settings_for(&c), &[("PROTO_ENABLE", "y")]);
    }
}
