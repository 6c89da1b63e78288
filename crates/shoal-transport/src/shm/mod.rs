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
//! Messages of at least `cma_threshold` bytes, in calls of at least
//! `cma_min_call` bytes, take a single-copy rendezvous path instead: the
//! sender writes only a descriptor frame (tag, signature, length, its pid
//! and the message's address) and its request stays pending;
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
//!
//! Parts: `segment` (the mapped segment of each rank: its layout, control
//! block, naming and permissions), `ring` (the single-producer,
//! single-consumer byte ring), `engine` (the progress loop that streams
//! frames through the rings, runs rendezvous reads and watches peers),
//! `split` (a large message read in place, copied by both its ranks), and
//! this module, the [`Transport`] built from them.

mod engine;
mod ring;
mod segment;
mod split;
mod window;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::doorbell::{wait_on_spinning, Doorbell, Spin, WaitPolicy};
use crate::frame::{waiting, Header, Kind, RndvInfo};
use crate::setup::wait_for_rank;
use crate::{
    Answer, Blocked, CallSig, KvStore, RecvInto, ReqId, Result, Tag, Transport, TransportError,
};
pub(crate) use engine::pid_dead;
use engine::{Inner, SendOp};
pub use segment::SLOT_BUFFERS;
use segment::{
    create_segment, may_read, open_segment, seg_path, Mapping, Unlink, CMA_SLOTS, CONTROL_SIZE,
    REASON_MAX, RING_HDR_SIZE,
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
/// Default size of the smallest call whose large messages are read in
/// place. A smaller call's data is likely in cache, where the ring's two
/// copies cost less than pinning the sender's pages: 2-rank ring allreduces
/// of 2 MiB took 105-111 us through the rings against 227-243 us read in
/// place, while from 8 MiB reading in place won (2-vCPU AMD EPYC,
/// docs/benchmarks.md).
pub const DEFAULT_CMA_MIN_CALL: usize = 8 << 20;
/// Default run-ahead budget of collective messages per peer
/// (`ShmConfig::run_ahead`): back to back, a broadcast's root otherwise ran
/// up to the 16 MiB window ahead of its receiver, whose early payloads then
/// missed its caches. 2-rank pipelined_chain broadcasts of 1 MiB on the
/// 2-vCPU AMD EPYC VM took 32-95 us with the window, 31-58 us held to 2 MiB
/// (docs/benchmarks.md).
pub const DEFAULT_RUN_AHEAD: usize = 2 << 20;
/// Default size from which a message read in place is split
/// (`ShmConfig::split_bytes`): its sender, which only waits, writes the
/// second half into the receive's buffer while the receiver reads the
/// first, so two cores copy it.
pub const DEFAULT_SPLIT_BYTES: usize = 1 << 20;
/// Default bytes of each of a rank's slot buffers (`ShmConfig::slot_size`).
pub const DEFAULT_SLOT_SIZE: usize = 16 << 10;

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
    /// ... and, while the host's ranks fit its logical CPUs, only in calls
    /// of at least this many bytes (`call_bytes` of [`Transport::isend`]);
    /// 0: in every call. Oversubscribed, CPU time is what runs out, and a
    /// single copy takes half the CPU time of the ring's two: 4 ranks on 2
    /// vCPUs ran 4 MiB allreduces and broadcasts faster reading in place.
    pub cma_min_call: usize,
    /// Messages read in place of at least this many bytes are split, the
    /// sender writing their second half ([`engine`]), while the host's
    /// ranks fit its logical CPUs (oversubscribed, the sender's core is
    /// busy with another rank); 0: never.
    pub split_bytes: usize,
    /// Bytes of each of this rank's slot buffers (rounded up to a cache
    /// line): exposures this small are copied there and read by peers with
    /// plain loads; 0 turns slots off. Equal on all local ranks.
    pub slot_size: usize,
    /// Bytes of one peer's messages this rank holds before their receives
    /// are posted (the flow-control window, [`crate::flow`]).
    pub unexpected_bytes: usize,
    /// Of that window, the most credit out to a peer under which a
    /// collective message still goes eagerly ([`crate::flow`]); later ones
    /// wait for their receives. Equal on all local ranks.
    pub run_ahead: usize,
    /// How waits spin before sleeping (`SHOAL_WAIT`).
    pub wait: WaitPolicy,
    /// Logical CPUs this host's ranks share (`SHOAL_HOST_CPUS`; by default
    /// this process's): whether they fit them decides how waits spin and
    /// whether large messages are split.
    pub cpus: usize,
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
            cma_min_call: DEFAULT_CMA_MIN_CALL,
            split_bytes: DEFAULT_SPLIT_BYTES,
            slot_size: DEFAULT_SLOT_SIZE,
            unexpected_bytes: crate::flow::DEFAULT_WINDOW,
            run_ahead: DEFAULT_RUN_AHEAD,
            wait: WaitPolicy::default(),
            cpus: process_cpus(),
        }
    }
}

/// How a message goes to its receiver.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    /// Through the ring, header and payload (spends flow-control credit).
    Eager,
    /// A descriptor through the ring; the receiver reads the payload from
    /// our memory once a receive matches it.
    Read,
    /// A descriptor through the ring; once a receive matches it, the
    /// receiver asks for the payload, which follows through the ring (a
    /// receiver that may not read our memory, out of credit).
    OnRequest,
}

/// Shared-memory transport; see the module docs.
pub struct ShmTransport {
    rank: usize,
    world: usize,
    timeout: Duration,
    own: Arc<Mapping>,
    bell: Doorbell,
    inner: Mutex<Inner>,
    /// Per global rank, the local peers whose exposed regions this rank may
    /// read ([`window`]).
    window: Vec<Option<window::WindowPeer>>,
    /// Whether this rank may read every other rank's exposed regions: the
    /// shared-memory algorithms' precondition, asked at every step of theirs
    /// (so kept, not recomputed: `window` does not change after connect).
    reads_all: bool,
    /// Bytes of each slot buffer ([`window`]); 0: no slots.
    slot_size: usize,
    /// Large messages are read in place only in calls this large
    /// (`ShmConfig::cma_min_call`, 0 when oversubscribed).
    cma_min_call: usize,
    /// How this rank's waits spin (`SHOAL_WAIT`).
    spin: Spin,
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
        let slot_size = cfg.slot_size.div_ceil(64) * 64;
        let seg_len =
            CONTROL_SIZE + locals.len() * (RING_HDR_SIZE + ring_size) + SLOT_BUFFERS * slot_size;
        let key = |r: usize| format!("{}/shm/{r}", cfg.job_id);

        let path = seg_path(&cfg.job_id, cfg.rank);
        let own = Arc::new(create_segment(&path, seg_len)?);
        own.prefault_slots(slot_size);
        // Unlinks the name once every local rank has mapped the segment, or
        // on any early return: a failed setup leaves nothing in /dev/shm.
        let name = Unlink(path);
        let pid = std::process::id();
        own.publish_owner(pid);
        store
            .set(&key(cfg.rank), pid.to_string().as_bytes())
            .map_err(io)?;

        let mut maps = Vec::new();
        for &r in &locals {
            if r == cfg.rank {
                maps.push((r, own.clone(), pid as i32));
                continue;
            }
            // The ring rank r writes to us (here) and ours to it (below).
            own.prefault_ring(slot_of(r).unwrap(), ring_size);
            let v = wait_for_rank(store, &key(r), r)?;
            let peer_pid = String::from_utf8_lossy(&v)
                .trim()
                .parse::<i32>()
                .map_err(|_| io_err(&format!("rank {r} published a bad pid {v:?}")))?;
            let map = Arc::new(open_segment(&seg_path(&cfg.job_id, r), seg_len)?);
            map.prefault_ring(me, ring_size);
            map.prefault_slots(slot_size);
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
        let mut window: Vec<Option<window::WindowPeer>> = (0..cfg.world).map(|_| None).collect();
        for (r, map, peer_pid) in maps.iter().filter(|(r, ..)| *r != cfg.rank) {
            window[*r] = Some(window::WindowPeer {
                readable: may_read(map, *peer_pid),
                bell: map.bell(),
                map: map.clone(),
                pid: *peer_pid,
            });
        }
        store
            .set(&format!("{}/mapped", key(cfg.rank)), b"1")
            .map_err(io)?;
        for &r in locals.iter().filter(|&&r| r != cfg.rank) {
            wait_for_rank(store, &format!("{}/mapped", key(r)), r)?;
        }
        drop(name);

        let mut inner = Inner::new(
            cfg.rank,
            cfg.world,
            &locals,
            cfg.cma_threshold,
            cfg.unexpected_bytes,
        );
        inner.matcher.limit_run_ahead(cfg.run_ahead);
        let oversubscribed = oversubscribed(locals.len(), cfg.cpus);
        if !oversubscribed {
            inner.split_bytes = cfg.split_bytes;
        }
        for (r, map, peer_pid) in maps.into_iter().filter(|(r, ..)| *r != cfg.rank) {
            let theirs = slot_of(r).unwrap();
            // The peer published (before the barrier) whether it reads us.
            let cma = cfg.cma_threshold > 0
                && me < CMA_SLOTS
                && map.control().cma_from[me].load(Ordering::Acquire) == 1;
            let (to_peer, from_peer) = (map.ring(me, ring_size), own.ring(theirs, ring_size));
            inner.add_peer(r, peer_pid, map, to_peer, from_peer, cma);
        }
        let bell = own.bell();
        let reads_all = window
            .iter()
            .enumerate()
            .all(|(r, p)| r == cfg.rank || p.as_ref().is_some_and(|p| p.readable));
        Ok(ShmTransport {
            rank: cfg.rank,
            world: cfg.world,
            timeout: cfg.timeout,
            own,
            bell,
            inner: Mutex::new(inner),
            window,
            reads_all,
            slot_size,
            cma_min_call: if oversubscribed { 0 } else { cfg.cma_min_call },
            spin: cfg.wait.spin(locals.len(), cfg.cpus),
        })
    }

    /// The doorbell this transport's peers ring; a [`crate::Routed`] lets its
    /// tcp side ring it too so one sleep covers both.
    pub fn doorbell(&self) -> Doorbell {
        self.bell.clone()
    }

    /// How many split messages this rank has written the second half of
    /// into their receivers (see [`engine`]).
    pub fn split_halves_written(&self) -> u64 {
        self.lock().halves_written
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

impl Transport for ShmTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn shared(&self) -> Option<&dyn crate::SharedWindow> {
        Some(self)
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
        call_bytes: usize,
    ) -> Result<ReqId> {
        let mut g = self.lock();
        if g.closed {
            return Err(io_err("transport is closed"));
        }
        let id = g.matcher.add_send(peer)?;
        let i = g.index[peer].expect("add_send checked the peer");
        // Standalone point-to-point sends stay eager while the receiver has
        // credit for them: a rank runs one of them at a time and may send
        // before it receives, so two ranks that send to each other first
        // work up to the flow-control window. Collective plans post
        // receives beside sends (verified deadlock-free under rendezvous
        // semantics), so their large messages take the single-copy path,
        // where their call is too large to be in cache, and the others stay
        // eager within the run-ahead budget. A message held back waits for
        // its receive; it is then read in place only where a large call's
        // would be, else it follows through the ring on request (cached
        // data copies twice for less).
        let collective = sig.is_collective();
        // An empty message is never read in place: its address may be null,
        // and a descriptor's address 0 means "ask for the payload".
        let may_read = g.outs[i].cma && call_bytes >= self.cma_min_call && len > 0;
        let how = if may_read && collective && len >= g.cma_threshold {
            How::Read
        } else if g.matcher.may_send_eagerly(peer, len, collective) {
            How::Eager
        } else if may_read {
            How::Read
        } else {
            How::OnRequest
        };
        let (header, payload) = match how {
            How::Eager => (Header::data(tag, sig, len).encode(), len),
            How::Read | How::OnRequest => {
                let info = RndvInfo {
                    // (0: no address to read; the receiver asks for the payload)
                    word: if how == How::Read { data as u64 } else { 0 },
                    cookie: id,
                };
                (info.encode(&Header::rndv(tag, sig, len)), 0)
            }
        };
        if how == How::OnRequest {
            let payload_header = Header::payload(tag, sig, len, id);
            g.outs[i].held.insert(id, (payload_header, data, len));
        }
        g.outs[i].queue.push_back(SendOp {
            id,
            header,
            data,
            len: payload,
            rndv: (how != How::Eager).then_some(len),
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
        wait_on_spinning(&self.bell, timeout, self.spin, || self.poll())
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

/// Logical CPUs this process may run on (its affinity, and its cgroup's
/// quota): the default count of the CPUs its host's ranks share.
pub fn process_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Whether a host's `local_ranks` outnumber its `cpus`: then some rank
/// always waits for a CPU, so no rank may busy-wait, a call's time does
/// not measure the job's throughput, and splitting a message across
/// helpers only adds switches.
pub fn oversubscribed(local_ranks: usize, cpus: usize) -> bool {
    local_ranks > cpus
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        self.close();
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
