//! Shared-memory transport for ranks on one host.
//!
//! Every local rank creates one segment in `/dev/shm` holding its control
//! block (doorbell, pid, bye and abort flags, abort reason) and one
//! single-producer/single-consumer ring per local sender. A sender streams
//! frames (64-byte header + payload padded to 64) into the receiver's ring,
//! so messages of any size pass through a fixed ring; the receiver matches
//! each header and copies the payload straight from the ring into the posted
//! buffer or sink, or to the heap when no receive matches yet.
//!
//! Messages of at least `cma_threshold` bytes take a single-copy rendezvous
//! path instead: the sender writes only a descriptor frame (tag, signature,
//! length, its pid and the message's address) and its request stays pending;
//! once the descriptor meets a receive (when it arrives, or later, when a
//! receive is posted for the queued descriptor), the receiver reads the
//! bytes straight from the sender's memory with `process_vm_readv` (see
//! [`crate::cma`]): into the posted buffer, or through a small cache-resident
//! staging buffer into the sink, so a receive-reduce is one pass over the
//! data. It then writes an `Ack` frame into the reverse ring and the
//! sender's request completes. Every rank probes at connect time whether it
//! may read each peer's memory (it may not under a restrictive Yama
//! `ptrace_scope` or across users) and publishes the answer; messages to a
//! rank that cannot read the sender go through the rings.
//!
//! Segments are created private to the user (mode 0600, never over an
//! existing name) and a peer's segment is mapped only if this user owns it
//! and nobody else may open it, so another user can neither read a job's
//! rings nor plant a segment for it. Segments are unlinked as soon as every
//! local rank has mapped them, or when setup fails, so neither a crash nor a
//! failed setup leaks one. Peer death is noticed by polling the peers' pids (and
//! by a failing `process_vm_readv`). Sending to self is rejected: plans never
//! do it.

use std::collections::VecDeque;
use std::ffi::CString;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cma;
use crate::doorbell::{wait_on, BellWords, Doorbell};
use crate::frame::{decode_waiting, waiting, Header, Kind, RndvInfo, HEADER_LEN};
use crate::matching::{closed, Incoming, Matcher, Pull};
use crate::setup::wait_for_rank;
use crate::{
    Answer, Blocked, CallSig, KvStore, RecvInto, ReqId, Result, Tag, Transport, TransportError,
};

/// Default ring size per directed pair of local ranks.
pub const DEFAULT_RING_SIZE: usize = 4 << 20;
/// Default size from which messages take the single-copy rendezvous path.
/// Below it the ring wins: a rendezvous costs a handshake (the sender's
/// request waits for the receiver's ack) and `process_vm_readv` pins the
/// sender's pages one by one, which for cache-resident data costs about
/// what the copy it saves does. Plans split transfers into pieces of
/// `SHOAL_CHUNK_BYTES`, so this only takes effect with pieces this large.
pub const DEFAULT_CMA_THRESHOLD: usize = 1 << 20;
/// Local ranks beyond this many never use the rendezvous path (the control
/// block has one flag per local rank).
const CMA_SLOTS: usize = 1024;
/// Staging buffer of rendezvous receives into a sink: small enough to stay
/// in cache between the read and the sink's pass over it.
const STAGE: usize = 128 << 10;
/// Bytes one `progress` call reads at most (it also finishes at most one
/// message), so the caller gets to post the steps a finished piece unblocks
/// and other channels keep moving during a long pull.
const PULL_BUDGET: usize = 256 << 10;
const CONTROL_SIZE: usize = 4096;
const RING_HDR_SIZE: usize = 128;
const REASON_MAX: usize = 1024;
/// Bytes published per step, so the receiver copies out while the sender
/// still copies in.
const CHUNK: usize = 256 << 10;
/// How often peers' pids are checked.
const LIVENESS_EVERY: Duration = Duration::from_millis(50);

/// Settings of a [`ShmTransport`].
#[derive(Clone, Debug)]
pub struct ShmConfig {
    pub rank: usize,
    pub world: usize,
    /// Global ranks on this host, including `rank`; only these are reachable.
    pub local_ranks: Vec<usize>,
    /// Unique per job; names segments and store keys.
    pub job_id: String,
    /// Bytes per directed ring (rounded up to 4 KiB).
    pub ring_size: usize,
    /// Limit for setup and for flushing sends on close.
    pub timeout: Duration,
    /// Messages of at least this many bytes are read by the receiver straight
    /// from the sender's memory (`process_vm_readv`) instead of being
    /// streamed through the ring; 0 turns that off (for this rank's sends
    /// and receives).
    pub cma_threshold: usize,
}

impl ShmConfig {
    pub fn new(rank: usize, world: usize, local_ranks: Vec<usize>, job_id: &str) -> ShmConfig {
        ShmConfig {
            rank,
            world,
            local_ranks,
            job_id: job_id.to_string(),
            ring_size: DEFAULT_RING_SIZE,
            timeout: Duration::from_secs(60),
            cma_threshold: DEFAULT_CMA_THRESHOLD,
        }
    }
}

/// The control block at the start of every segment. Written by its owner,
/// read by everyone.
#[repr(C)]
struct Control {
    bell: BellWords,
    pid: AtomicU32,
    abort: AtomicU32,
    bye: AtomicU32,
    reason_len: AtomicU32,
    reason: std::cell::UnsafeCell<[u8; REASON_MAX]>,
    /// Where this segment is mapped in its owner, so peers can probe whether
    /// they may read the owner's memory (they read `pid` through it).
    addr: AtomicU64,
    /// `cma_from[s]` is 1 when this rank reads rendezvous messages from the
    /// rank in local slot `s` (it probed that it may; written before the
    /// setup barrier).
    cma_from: [AtomicU8; CMA_SLOTS],
}

const _: () = assert!(std::mem::size_of::<Control>() <= CONTROL_SIZE);

/// Ring positions, each on its own cache line (producer and consumer write one each).
#[repr(C, align(64))]
struct Pos(AtomicU64);

#[repr(C)]
struct RingHdr {
    tail: Pos,
    head: Pos,
}

/// One mapped segment; unmapped when the last user drops it.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared memory accessed through atomics and the SPSC
// ring protocol.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl Mapping {
    fn control(&self) -> &Control {
        // SAFETY: every segment starts with a control block.
        unsafe { &*(self.ptr as *const Control) }
    }

    fn ring(self: &Arc<Self>, slot: usize, size: usize) -> Ring {
        let off = CONTROL_SIZE + slot * (RING_HDR_SIZE + size);
        assert!(off + RING_HDR_SIZE + size <= self.len);
        // SAFETY: in bounds (asserted).
        let hdr = unsafe { self.ptr.add(off) } as *const RingHdr;
        let data = unsafe { self.ptr.add(off + RING_HDR_SIZE) };
        Ring {
            hdr,
            data,
            size,
            _map: self.clone(),
        }
    }

    fn bell(self: &Arc<Self>) -> Doorbell {
        let words = &self.control().bell as *const BellWords;
        // SAFETY: the bell lives in this mapping, which the clone keeps alive.
        unsafe { Doorbell::at(words, self.clone()) }
    }
}

/// One direction of one pair: a byte ring with monotonically growing positions.
struct Ring {
    hdr: *const RingHdr,
    data: *mut u8,
    size: usize,
    _map: Arc<Mapping>,
}

impl Ring {
    fn hdr(&self) -> &RingHdr {
        // SAFETY: points into the live mapping.
        unsafe { &*self.hdr }
    }

    /// Copies `src` into the ring at position `pos` (wrapping).
    fn write(&self, pos: u64, src: &[u8]) {
        let at = (pos % self.size as u64) as usize;
        let first = src.len().min(self.size - at);
        // SAFETY: both ranges are inside the ring; the producer owns [tail, head+size).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.data.add(at), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data, src.len() - first);
        }
    }

    /// The contiguous readable bytes at `pos`, at most `max`.
    fn read(&self, pos: u64, max: usize) -> &[u8] {
        let at = (pos % self.size as u64) as usize;
        // SAFETY: the consumer owns [head, tail) and `max` stays below it.
        unsafe { std::slice::from_raw_parts(self.data.add(at), max.min(self.size - at)) }
    }
}

/// A send being streamed into a ring.
struct SendOp {
    id: ReqId,
    header: [u8; HEADER_LEN],
    data: *const u8,
    /// Payload bytes in the ring (0 for a rendezvous descriptor).
    len: usize,
    /// A rendezvous descriptor: the request completes on the peer's ack.
    rndv: bool,
    /// Frame bytes (header + padded payload) already in the ring.
    sent: usize,
}

impl SendOp {
    fn frame_len(&self) -> usize {
        HEADER_LEN + pad64(self.len)
    }
}

fn pad64(n: usize) -> usize {
    n.div_ceil(64) * 64
}

struct OutChan {
    ring: Ring,
    tail: u64,
    head_seen: u64,
    queue: VecDeque<SendOp>,
    /// Header-only control frames (acks), written at the next frame boundary
    /// ahead of queued sends.
    ctl: VecDeque<[u8; HEADER_LEN]>,
    /// Whether large messages to this peer take the rendezvous path.
    cma: bool,
    /// Rendezvous sends whose descriptor is out, waiting for the peer's ack.
    awaiting: Vec<ReqId>,
    bell: Doorbell,
}

struct InChan {
    peer: usize,
    ring: Ring,
    head: u64,
    incoming: Option<Incoming>,
    /// Rung after freeing space, in case the producer waits for it.
    producer_bell: Doorbell,
    producer: Arc<Mapping>,
    pid: i32,
    bye_done: bool,
}

struct Inner {
    matcher: Matcher,
    outs: Vec<OutChan>,
    ins: Vec<InChan>,
    /// Rendezvous messages being read, oldest first.
    pulls: VecDeque<Pull>,
    /// Staging for rendezvous reads into sinks (`STAGE` bytes, 64-aligned).
    stage: Vec<Line>,
    cma_threshold: usize,
    /// Index into `outs`/`ins` by global rank.
    index: Vec<Option<usize>>,
    last_liveness: Instant,
    closed: bool,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

// SAFETY: raw pointers in the channels point into shared mappings kept alive
// by `Arc<Mapping>`s; send buffers are the caller's responsibility (isend).
unsafe impl Send for Inner {}

/// Shared-memory transport; see the module docs.
pub struct ShmTransport {
    rank: usize,
    world: usize,
    timeout: Duration,
    own: Arc<Mapping>,
    bell: Doorbell,
    inner: Mutex<Inner>,
}

impl ShmTransport {
    /// Creates this rank's segment, maps every local peer's, and unlinks its
    /// own once all local peers have mapped it. Blocks on `store` until all
    /// local ranks arrive.
    pub fn connect(cfg: &ShmConfig, store: &dyn KvStore) -> Result<ShmTransport> {
        let mut locals = cfg.local_ranks.clone();
        locals.sort_unstable();
        locals.dedup();
        let slot_of = |r: usize| locals.iter().position(|&x| x == r);
        let me = slot_of(cfg.rank).ok_or_else(|| io_err("local_ranks must contain this rank"))?;
        let ring_size = cfg.ring_size.max(4096).div_ceil(4096) * 4096;
        let seg_len = CONTROL_SIZE + locals.len() * (RING_HDR_SIZE + ring_size);
        let key = |r: usize| format!("{}/shm/{r}", cfg.job_id);

        let path = seg_path(&cfg.job_id, cfg.rank);
        let own = Arc::new(create_segment(&path, seg_len)?);
        // Unlinks the name once every local rank has mapped the segment, or
        // on any early return: a failed setup leaves nothing in /dev/shm.
        let name = Unlink(path);
        let pid = std::process::id();
        own.control().pid.store(pid, Ordering::Release);
        own.control().addr.store(own.ptr as u64, Ordering::Release);
        store
            .set(&key(cfg.rank), pid.to_string().as_bytes())
            .map_err(io)?;

        let mut maps = Vec::new();
        for &r in &locals {
            if r == cfg.rank {
                maps.push((r, own.clone(), pid as i32));
                continue;
            }
            let v = wait_for_rank(store, &key(r), r)?;
            let peer_pid = String::from_utf8_lossy(&v)
                .trim()
                .parse::<i32>()
                .map_err(|_| io_err(&format!("rank {r} published a bad pid {v:?}")))?;
            let map = Arc::new(open_segment(&seg_path(&cfg.job_id, r), seg_len)?);
            let owner = map.control().pid.load(Ordering::Acquire);
            if owner as i32 != peer_pid {
                return Err(io_err(&format!(
                    "the segment of rank {r} was made by process {owner}, but rank {r} is \
                     process {peer_pid}"
                )));
            }
            if cfg.cma_threshold > 0 && me < CMA_SLOTS && may_read(&map, peer_pid) {
                own.control().cma_from[slot_of(r).unwrap()].store(1, Ordering::Release);
            }
            maps.push((r, map, peer_pid));
        }
        store
            .set(&format!("{}/mapped", key(cfg.rank)), b"1")
            .map_err(io)?;
        for &r in locals.iter().filter(|&&r| r != cfg.rank) {
            wait_for_rank(store, &format!("{}/mapped", key(r)), r)?;
        }
        drop(name);

        let mut inner = Inner {
            matcher: Matcher::new(cfg.rank, locals.iter().copied()),
            outs: Vec::new(),
            ins: Vec::new(),
            pulls: VecDeque::new(),
            stage: Vec::new(),
            cma_threshold: cfg.cma_threshold,
            index: vec![None; cfg.world.max(locals.iter().max().map_or(0, |m| m + 1))],
            last_liveness: Instant::now(),
            closed: false,
        };
        for (r, map, peer_pid) in maps.into_iter().filter(|(r, ..)| *r != cfg.rank) {
            inner.index[r] = Some(inner.outs.len());
            let theirs = slot_of(r).unwrap();
            // The peer published (before the barrier) whether it reads us.
            let cma = cfg.cma_threshold > 0
                && me < CMA_SLOTS
                && map.control().cma_from[me].load(Ordering::Acquire) == 1;
            inner.outs.push(OutChan {
                ring: map.ring(me, ring_size),
                tail: 0,
                head_seen: 0,
                queue: VecDeque::new(),
                ctl: VecDeque::new(),
                cma,
                awaiting: Vec::new(),
                bell: map.bell(),
            });
            inner.ins.push(InChan {
                peer: r,
                ring: own.ring(theirs, ring_size),
                head: 0,
                incoming: None,
                producer_bell: map.bell(),
                producer: map,
                pid: peer_pid,
                bye_done: false,
            });
        }
        let bell = own.bell();
        Ok(ShmTransport {
            rank: cfg.rank,
            world: cfg.world,
            timeout: cfg.timeout,
            own,
            bell,
            inner: Mutex::new(inner),
        })
    }

    /// The doorbell this transport's peers ring; a [`crate::Routed`] lets its
    /// tcp side ring it too so one sleep covers both.
    pub fn doorbell(&self) -> Doorbell {
        self.bell.clone()
    }

    /// Whether `peer` is another local rank of this transport.
    pub fn reaches(&self, peer: usize) -> bool {
        self.lock().index.get(peer).is_some_and(|i| i.is_some())
    }

    /// Whether messages of at least `cma_threshold` bytes to `peer` take the
    /// single-copy path (`peer` may read this process's memory, and neither
    /// side turned it off).
    pub fn uses_cma(&self, peer: usize) -> bool {
        let g = self.lock();
        let i = g.index.get(peer).copied().flatten();
        i.is_some_and(|i| g.outs[i].cma)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pushes pending sends, says bye, and stops. Called by `Drop` too.
    pub fn close(&self) {
        let deadline = Instant::now() + self.timeout.min(Duration::from_secs(10));
        loop {
            let pending = {
                let mut g = self.lock();
                if g.closed {
                    return;
                }
                let _ = g.poll();
                // Rendezvous sends wait for their acks (the peer reads our
                // memory until then), and our own acks must go out.
                g.outs
                    .iter()
                    .any(|o| !o.queue.is_empty() || !o.ctl.is_empty() || !o.awaiting.is_empty())
            };
            if !pending || Instant::now() >= deadline || self.lock().matcher.health().is_err() {
                break;
            }
            let _ = self.wait(Duration::from_millis(10));
        }
        let mut g = self.lock();
        g.closed = true;
        self.own.control().bye.store(1, Ordering::Release);
        for o in &g.outs {
            o.bell.ring();
        }
        g.outs.clear();
    }

    /// Progress plus error reporting, as used by `progress`, `test` and `wait`.
    fn poll(&self) -> Result<bool> {
        let mut g = self.lock();
        let changed = g.poll();
        g.matcher.health()?;
        Ok(changed)
    }
}

impl Inner {
    /// Moves bytes in both directions and checks flags; returns whether anything moved.
    fn poll(&mut self) -> bool {
        let mut changed = false;
        for i in 0..self.outs.len() {
            changed |= self.push_out(i);
        }
        for i in 0..self.ins.len() {
            changed |= self.pull_in(i);
        }
        // Answers to queries just read (they do not count as progress).
        for i in 0..self.outs.len() {
            if !self.outs[i].ctl.is_empty() {
                self.push_out(i);
            }
        }
        changed |= self.run_pulls();
        self.check_flags();
        if self.last_liveness.elapsed() >= LIVENESS_EVERY {
            self.last_liveness = Instant::now();
            self.check_liveness();
        }
        changed
    }

    /// Streams control frames and queued sends of `outs[i]` into its ring
    /// while space lasts.
    fn push_out(&mut self, i: usize) -> bool {
        let Inner { outs, matcher, .. } = self;
        let o = &mut outs[i];
        let size = o.ring.size as u64;
        let mut moved = false;
        loop {
            let boundary = o.queue.front().is_none_or(|op| op.sent == 0);
            let ctl = boundary && !o.ctl.is_empty();
            if !ctl && o.queue.is_empty() {
                break;
            }
            if o.tail - o.head_seen == size {
                o.head_seen = o.ring.hdr().head.0.load(Ordering::Acquire);
                if o.tail - o.head_seen == size {
                    break;
                }
            }
            if ctl {
                // Positions and sizes are multiples of 64: a header fits.
                let frame = o.ctl.pop_front().unwrap();
                o.ring.write(o.tail, &frame);
                o.tail += HEADER_LEN as u64;
            } else {
                let op = o.queue.front_mut().unwrap();
                let free = (size - (o.tail - o.head_seen)) as usize;
                o.tail += push_chunk(&o.ring, o.tail, op, free.min(CHUNK)) as u64;
                if op.sent == op.frame_len() {
                    let (id, rndv) = (op.id, op.rndv);
                    o.queue.pop_front();
                    if rndv {
                        o.awaiting.push(id);
                    } else {
                        matcher.complete(id);
                    }
                }
            }
            o.ring.hdr().tail.0.store(o.tail, Ordering::Release);
            o.bell.ring();
            moved = true;
        }
        moved
    }

    /// Consumes frames from `ins[i]`'s ring into receives or the unexpected
    /// queue. Returns whether anything moved (`Waiting` and `Query` frames
    /// are talk about progress, not progress).
    fn pull_in(&mut self, i: usize) -> bool {
        let Inner {
            ins, outs, matcher, ..
        } = self;
        let c = &mut ins[i];
        let tail = c.ring.hdr().tail.0.load(Ordering::Acquire);
        if tail == c.head {
            return false;
        }
        let mut moved = false;
        while c.head < tail {
            let mut inc = match c.incoming.take() {
                Some(inc) => inc,
                None => {
                    let raw = c.ring.read(c.head, HEADER_LEN);
                    let h = match Header::decode(raw) {
                        Ok(h) => h,
                        Err(e) => {
                            matcher.peer_down(c.peer, &e.to_string());
                            return true;
                        }
                    };
                    let info = RndvInfo::decode(raw);
                    let answer = (h.kind == Kind::Waiting).then(|| decode_waiting(&h, raw));
                    c.head += HEADER_LEN as u64;
                    moved |= !matches!(h.kind, Kind::Waiting | Kind::Query);
                    match h.kind {
                        Kind::Rndv => {
                            matcher.on_rndv(c.peer, &h, info);
                            continue;
                        }
                        Kind::Ack => {
                            // (No out channel once closed: nothing awaits.)
                            if let Some(o) = outs.get_mut(i) {
                                on_ack(o, matcher, c.peer, info);
                            }
                            continue;
                        }
                        Kind::Waiting => {
                            matcher.on_waiting(c.peer, answer.unwrap());
                            continue;
                        }
                        Kind::Query => {
                            // Answered by `poll` once the frames are read.
                            if let Some(o) = outs.get_mut(i) {
                                o.ctl.push_back(waiting(matcher.blocked()));
                            }
                            continue;
                        }
                        _ => matcher.on_header(c.peer, &h),
                    }
                }
            };
            moved = true;
            while !inc.done() && c.head < tail {
                let piece = c
                    .ring
                    .read(c.head, ((tail - c.head) as usize).min(inc.remaining()));
                let n = piece.len();
                inc.push(piece);
                c.head += n as u64;
            }
            if inc.done() {
                c.head = pad64(c.head as usize) as u64;
                matcher.on_complete(c.peer, inc);
            } else {
                c.incoming = Some(inc);
            }
            c.ring.hdr().head.0.store(c.head, Ordering::Release);
        }
        c.ring.hdr().head.0.store(c.head, Ordering::Release);
        c.producer_bell.ring();
        moved
    }

    /// Reads matched rendezvous messages from their senders, oldest first,
    /// and acks the finished ones: per call at most `PULL_BUDGET` bytes and
    /// at most one finished message (a long message takes several calls).
    fn run_pulls(&mut self) -> bool {
        self.pulls.extend(self.matcher.take_pulls());
        let mut budget = PULL_BUDGET;
        let mut moved = false;
        while budget > 0 {
            let Some(p) = self.pulls.front_mut() else {
                break;
            };
            let peer = p.peer;
            let ch = self.index[peer].expect("pulls come from local peers");
            if !self.matcher.may_pull(peer) {
                // The peer died or closed, or the job failed: nobody to ack.
                // (Failing it is a no-op when the matcher did already, and
                // after an abort the request reports the abort.)
                let p = self.pulls.pop_front().unwrap();
                if !self.matcher.is_fatal() {
                    self.matcher.fail_incoming(p.inc, closed(peer));
                }
                continue;
            }
            moved = true;
            let pid = self.ins[ch].pid;
            let status = if p.inc.wanted() {
                let step = budget.min(p.inc.remaining());
                match pull_step(pid, p, step, &mut self.stage) {
                    Ok(n) => {
                        budget -= n;
                        if !p.inc.done() {
                            continue;
                        }
                        0
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                        let why = format!("process {pid} exited (process_vm_readv: {e})");
                        self.pulls.pop_front();
                        self.matcher.peer_down(peer, &why);
                        continue;
                    }
                    Err(e) => {
                        let p = self.pulls.pop_front().unwrap();
                        let what = format!(
                            "shm: reading {} bytes from rank {peer} (process_vm_readv): {e}",
                            p.inc.len
                        );
                        self.matcher.fail_incoming(p.inc, TransportError::Io(what));
                        self.ack(ch, p.rndv.cookie, 1);
                        continue;
                    }
                }
            } else {
                0
            };
            let p = self.pulls.pop_front().unwrap();
            if p.inc.wanted() {
                self.matcher.on_complete(peer, p.inc);
            }
            self.ack(ch, p.rndv.cookie, status);
            // Let the caller act on it (post the steps it unblocks, which
            // keeps pipelined plans flowing) before reading the next one.
            break;
        }
        moved
    }

    /// Sends a header-only control frame to `peer` ahead of queued data;
    /// false if `peer` is not a local rank (or the transport closed).
    fn send_control(&mut self, peer: usize, frame: [u8; HEADER_LEN]) -> bool {
        let Some(ch) = self.index.get(peer).copied().flatten() else {
            return false;
        };
        let Some(o) = self.outs.get_mut(ch) else {
            return false;
        };
        o.ctl.push_back(frame);
        self.push_out(ch);
        true
    }

    /// Queues an ack of the rendezvous send `cookie` to `outs[ch]`'s peer.
    fn ack(&mut self, ch: usize, cookie: u64, status: u32) {
        let info = RndvInfo {
            word: status as u64,
            cookie,
        };
        let frame = info.encode(&Header::control(Kind::Ack, 0));
        if let Some(o) = self.outs.get_mut(ch) {
            o.ctl.push_back(frame);
            self.push_out(ch);
        }
    }

    /// Picks up peers' abort and bye flags.
    fn check_flags(&mut self) {
        for c in &mut self.ins {
            let ctl = c.producer.control();
            if ctl.abort.load(Ordering::Acquire) != 0 {
                let reason = read_reason(ctl);
                self.matcher.set_fatal(TransportError::Aborted {
                    peer: c.peer,
                    reason,
                });
            }
            if !c.bye_done && ctl.bye.load(Ordering::Acquire) != 0 {
                let drained = c.ring.hdr().tail.0.load(Ordering::Acquire) == c.head;
                if drained && c.incoming.is_none() {
                    c.bye_done = true;
                    self.matcher.peer_bye(c.peer);
                }
            }
        }
        // A peer that closed will never ack. (After an abort, which a peer
        // sets before it closes, the requests report the abort instead.)
        let fatal = self.matcher.is_fatal();
        for (o, c) in self.outs.iter_mut().zip(&self.ins) {
            if c.bye_done && !fatal {
                for id in o.awaiting.drain(..) {
                    self.matcher.fail(id, closed(c.peer));
                }
            }
        }
    }

    fn check_liveness(&mut self) {
        for c in &self.ins {
            if c.bye_done || c.producer.control().bye.load(Ordering::Acquire) != 0 {
                continue;
            }
            if let Some(why) = pid_dead(c.pid) {
                self.matcher
                    .peer_down(c.peer, &format!("process {} {why}", c.pid));
            }
        }
    }
}

/// Completes (or fails) the rendezvous send `info.cookie` to `peer`, acked.
fn on_ack(o: &mut OutChan, matcher: &mut Matcher, peer: usize, info: RndvInfo) {
    let Some(k) = o.awaiting.iter().position(|&id| id == info.cookie) else {
        return;
    };
    let id = o.awaiting.swap_remove(k);
    if info.word == 0 {
        matcher.complete(id);
    } else {
        let what = format!("shm: rank {peer} could not read this message from our memory");
        matcher.fail(id, TransportError::Io(what));
    }
}

/// Reads up to `max` more bytes of pull `p` from process `pid`: straight into
/// a plain destination, or through `stage` into a sink. Returns the count.
fn pull_step(pid: i32, p: &mut Pull, max: usize, stage: &mut Vec<Line>) -> std::io::Result<usize> {
    let addr = p.rndv.word + p.inc.received as u64;
    if let Some(dst) = p.inc.direct() {
        let n = max.min(dst.len());
        let got = cma::read(pid, addr, &mut dst[..n])?;
        if got == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
        }
        p.inc.advance(got);
        return Ok(got);
    }
    if stage.is_empty() {
        stage.resize(STAGE / 64, Line([0; 64]));
    }
    // SAFETY: `Line` is 64 plain bytes; the vector holds STAGE bytes.
    let stage = unsafe { std::slice::from_raw_parts_mut(stage.as_mut_ptr().cast::<u8>(), STAGE) };
    let n = max.min(STAGE).min(p.inc.remaining());
    // Every piece but the last a multiple of 64, as sinks expect (a short
    // read only happens just before an error).
    cma::read_exact(pid, addr, &mut stage[..n])?;
    p.inc.push(&stage[..n]);
    Ok(n)
}

/// Whether this process may read the memory of `pid`, the owner of `map`:
/// reads the owner's `pid` field through the owner's own address of it.
fn may_read(map: &Mapping, pid: i32) -> bool {
    let ctl = map.control();
    let addr = ctl.addr.load(Ordering::Acquire) + std::mem::offset_of!(Control, pid) as u64;
    let expect = ctl.pid.load(Ordering::Acquire).to_ne_bytes();
    ctl.addr.load(Ordering::Acquire) != 0 && cma::probe(pid, addr, &expect)
}

/// Writes the next up-to-`room` bytes of `op`'s frame at ring position `pos`;
/// returns how many ring bytes were used (a multiple of 64).
fn push_chunk(ring: &Ring, pos: u64, op: &mut SendOp, room: usize) -> usize {
    let mut used = 0;
    if op.sent == 0 {
        ring.write(pos, &op.header);
        op.sent = HEADER_LEN;
        used = HEADER_LEN;
    }
    let n = (op.frame_len() - op.sent).min(room - used);
    let off = op.sent - HEADER_LEN;
    let copy = n.min(op.len.saturating_sub(off));
    if copy > 0 {
        // SAFETY: the caller of isend keeps `data[..len]` valid until completion.
        let src = unsafe { std::slice::from_raw_parts(op.data.add(off), copy) };
        ring.write(pos + used as u64, src);
    }
    op.sent += n;
    used + n
}

fn read_reason(ctl: &Control) -> String {
    let n = (ctl.reason_len.load(Ordering::Acquire) as usize).min(REASON_MAX);
    // SAFETY: written before the abort flag was released; we acquired it.
    let bytes = unsafe { &(&*ctl.reason.get())[..n] };
    String::from_utf8_lossy(bytes).into_owned()
}

/// Why `pid` is dead, or `None` while it runs. A zombie counts as dead: it
/// will never write again but `kill(pid, 0)` still succeeds on it.
fn pid_dead(pid: i32) -> Option<&'static str> {
    // SAFETY: signal 0 only checks existence.
    if unsafe { libc::kill(pid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return Some("exited");
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => match s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
        {
            Some('Z') | Some('X') => Some("exited (zombie)"),
            _ => None,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("exited"),
        Err(_) => None,
    }
}

impl Transport for ShmTransport {
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
    ) -> Result<ReqId> {
        let mut g = self.lock();
        if g.closed {
            return Err(io_err("transport is closed"));
        }
        let id = g.matcher.add_send(peer)?;
        let i = g.index[peer].expect("add_send checked the peer");
        // Standalone point-to-point sends stay eager: a rank runs one of them
        // at a time and may send before it receives, so waiting for the peer's
        // receive could deadlock two ranks that send to each other first.
        // Collective plans post receives beside sends (verified deadlock-free
        // under rendezvous semantics), so they take the single-copy path.
        let rndv = g.outs[i].cma && len >= g.cma_threshold && sig.kind != CallSig::P2P_KIND;
        let (header, payload) = if rndv {
            let info = RndvInfo {
                word: data as u64,
                cookie: id,
            };
            (info.encode(&Header::rndv(tag, sig, len)), 0)
        } else {
            (Header::data(tag, sig, len).encode(), len)
        };
        g.outs[i].queue.push_back(SendOp {
            id,
            header,
            data,
            len: payload,
            rndv,
            sent: 0,
        });
        g.push_out(i);
        Ok(id)
    }

    unsafe fn irecv(&self, peer: usize, tag: Tag, sig: CallSig, into: RecvInto) -> Result<ReqId> {
        let mut g = self.lock();
        let id = g.matcher.post_recv(peer, tag, sig, into)?;
        if let Some(i) = g.index.get(peer).copied().flatten() {
            g.pull_in(i);
            g.run_pulls();
        }
        Ok(id)
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
        wait_on(&self.bell, timeout, || self.poll())
    }

    fn abort(&self, reason: &str) {
        let ctl = self.own.control();
        let n = reason.len().min(REASON_MAX);
        // SAFETY: only this rank writes its reason, before releasing the flag.
        unsafe { (&mut *ctl.reason.get())[..n].copy_from_slice(&reason.as_bytes()[..n]) };
        ctl.reason_len.store(n as u32, Ordering::Release);
        ctl.abort.store(1, Ordering::Release);
        let mut g = self.lock();
        g.matcher.set_fatal(TransportError::Aborted {
            peer: self.rank,
            reason: reason.to_string(),
        });
        for o in &g.outs {
            o.bell.ring();
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
            g.send_control(peer, frame);
        }
    }

    fn ask(&self, peer: usize) -> Result<()> {
        let mut g = self.lock();
        g.matcher.forget_answer(peer);
        if !g.send_control(peer, Header::control(Kind::Query, 0).encode()) {
            return Err(io_err(&format!("rank {peer} is not reachable")));
        }
        Ok(())
    }

    fn answer(&self, peer: usize) -> Option<Answer> {
        self.lock().matcher.answer(peer)
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        self.close();
    }
}

fn seg_path(job: &str, rank: usize) -> String {
    let job: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("/dev/shm/shoal-{job}-{rank}")
}

/// Creates a segment only this user may open. An existing file of that
/// name is refused, not reused or removed: segment names carry a random
/// nonce per job, so another process made it, maybe to read our rings.
fn create_segment(path: &str, len: usize) -> Result<Mapping> {
    let c = CString::new(path).map_err(|_| io_err("bad path"))?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: plain libc calls on a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600) };
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
        return Err(io_err(&format!(
            "{path} already exists: another process took this job's segment name; refusing it"
        )));
    }
    if fd < 0 {
        return Err(os_err(&format!("create {path}")));
    }
    // Reserve the pages now: a full /dev/shm fails here instead of SIGBUS later.
    let rc = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
    if rc != 0 {
        unsafe { libc::close(fd) };
        unlink(path);
        return Err(io_err(&format!(
            "allocate {len} bytes for {path}: errno {rc}"
        )));
    }
    map_fd(fd, len, path)
}

/// Maps a peer's segment, if it is what its owner made: a regular file of
/// this user that no other user may open, of the expected size.
fn open_segment(path: &str, len: usize) -> Result<Mapping> {
    let c = CString::new(path).map_err(|_| io_err("bad path"))?;
    // SAFETY: plain libc calls.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(os_err(&format!("open {path}")));
    }
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let problem = if unsafe { libc::fstat(fd, &mut st) } != 0 {
        Some(format!("fstat {path}: {}", std::io::Error::last_os_error()))
    } else {
        segment_problem(path, &st, len)
    };
    if let Some(problem) = problem {
        unsafe { libc::close(fd) };
        return Err(io_err(&problem));
    }
    map_fd(fd, len, path)
}

/// Why the file `st` describes is not a segment this rank may map, if it is not.
fn segment_problem(path: &str, st: &libc::stat, len: usize) -> Option<String> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        Some(format!("{path} is not a regular file; refusing it"))
    } else if st.st_uid != me {
        Some(format!(
            "{path} belongs to uid {}, not to this user (uid {me}); refusing a segment \
             another user could have planted",
            st.st_uid
        ))
    } else if st.st_mode & 0o077 != 0 {
        Some(format!(
            "{path} has mode {:o}: other users may open it; refusing it",
            st.st_mode & 0o777
        ))
    } else if st.st_size as usize != len {
        Some(format!(
            "{path} has {} bytes, expected {len} (ring sizes differ between ranks?)",
            st.st_size
        ))
    } else {
        None
    }
}

fn map_fd(fd: i32, len: usize, path: &str) -> Result<Mapping> {
    // SAFETY: mapping a file we just opened; the fd is closed right after.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    let err = os_err(&format!("mmap {path}"));
    unsafe { libc::close(fd) };
    if p == libc::MAP_FAILED {
        return Err(err);
    }
    Ok(Mapping { ptr: p.cast(), len })
}

fn unlink(path: &str) {
    if let Ok(c) = CString::new(path) {
        // SAFETY: plain libc call.
        unsafe { libc::unlink(c.as_ptr()) };
    }
}

/// Unlinks its path when dropped.
struct Unlink(String);

impl Drop for Unlink {
    fn drop(&mut self) {
        unlink(&self.0);
    }
}

fn io_err(msg: &str) -> TransportError {
    TransportError::Io(format!("shm: {msg}"))
}

fn os_err(what: &str) -> TransportError {
    io_err(&format!("{what}: {}", std::io::Error::last_os_error()))
}

fn io(e: std::io::Error) -> TransportError {
    io_err(&format!("store: {e}"))
}
