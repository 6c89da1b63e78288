//! The executor: runs one rank's plan over a transport.
//!
//! Every step whose dependencies are done is posted at once (sends and
//! receives as non-blocking requests, copies and reductions run inline), so
//! the chunk pipelining a generator writes into its plan happens on the wire.
//!
//! A call that finishes tells the transport (`Transport::finish_call`), which
//! then refuses the call's messages as mismatches; a call blocked for a
//! while tells the ranks it waits on which call it is in
//! (`Transport::set_blocked`); a call that times out asks around who stopped
//! ([`crate::stall`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use shoal_plan::{Buf, Op, Plan, Region};
use shoal_transport::{
    Blocked, CallSig, Exposed, RecvInto, ReqId, SharedWindow, SlotExpose, Tag, Transport,
};

pub use crate::buffers::CallBuffers;
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, ErrorKind, Result};
use crate::reduce::reduce_into;
use crate::stall::{answer_time, Stall};
use crate::trace::{StepKind, StepTimer, Tracing};

/// How long a call goes without progress before it tells the ranks it waits
/// on which call it is in (they report a mismatch if theirs differs): soon
/// enough that calls deadlocked on each other fail fast, late enough that
/// healthy calls rarely send it.
const BLOCKED_AFTER: Duration = Duration::from_millis(100);

/// Bytes a reduce-while-reading step reads from a peer at a time: small
/// enough that the piece is still in L1/L2 when it is reduced.
const READ_PIECE: usize = 32 << 10;

/// A plan with the dependency graph inverted once, so it can be cached and
/// executed many times.
pub struct CompiledPlan {
    pub plan: Plan,
    dependents: Vec<Vec<usize>>,
    dep_counts: Vec<u32>,
}

impl CompiledPlan {
    pub fn new(plan: Plan) -> CompiledPlan {
        let mut dependents = vec![Vec::new(); plan.steps.len()];
        for (i, step) in plan.steps.iter().enumerate() {
            for &d in &step.deps {
                dependents[d].push(i);
            }
        }
        let dep_counts = plan.steps.iter().map(|s| s.deps.len() as u32).collect();
        CompiledPlan {
            plan,
            dependents,
            dep_counts,
        }
    }
}

/// Everything about the call that is not the plan.
pub struct CallContext<'a> {
    pub transport: &'a dyn Transport,
    /// Global rank of each group-local rank.
    pub members: &'a [usize],
    pub comm: u32,
    pub seq: u32,
    pub sig: CallSig,
    pub dtype: DType,
    pub op: ReduceOp,
    pub timeout: Duration,
    /// Names the call in errors, e.g. `allreduce(algorithm=ring, count=7, dtype=float32)`.
    pub describe: &'a dyn Fn() -> String,
}

/// A raw pointer that may cross into a transport's I/O thread; the executor
/// keeps the memory alive until the request completes.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);
// SAFETY: see the type's doc; the executor does not touch the region while the
// receive that writes it is in flight (the plan verifier rules out races).
unsafe impl Send for SendPtr {}

/// What the executor reuses from call to call, under the engine's
/// execution lock: the plans' scratch memory and a run's bookkeeping, so a
/// call of a known shape allocates nothing.
#[derive(Default)]
pub struct Workspace {
    scratch: Vec<u64>,
    lists: Lists,
}

/// A run's bookkeeping lists (see `Run`), kept with their capacity.
#[derive(Default)]
struct Lists {
    remaining: Vec<u32>,
    ready: VecDeque<usize>,
    pending: Vec<(ReqId, usize)>,
    shared_waiting: Vec<usize>,
    completed: Vec<usize>,
}

struct Run<'a> {
    cp: &'a CompiledPlan,
    ctx: &'a CallContext<'a>,
    bufs: CallBuffers,
    scratch: *mut u8,
    remaining: Vec<u32>,
    ready: VecDeque<usize>,
    pending: Vec<(ReqId, usize)>,
    /// Posted shared-memory steps (reads, Releases, slot Exposes) waiting
    /// on a peer.
    shared_waiting: Vec<usize>,
    /// Steps `reap` found complete (kept for its capacity).
    completed: Vec<usize>,
    /// This call's exposure through the rank's slot: its flag and buffer.
    slot: Option<(u32, usize)>,
    done: usize,
    /// Times the steps when this process traces (`SHOAL_TRACE`).
    timer: Option<StepTimer<'a>>,
}

/// Runs `cp` to completion. `scratch` is grown to the plan's needs; the
/// call goes into the flight recorder and, when on, the trace.
pub fn execute(
    cp: &CompiledPlan,
    ctx: &CallContext,
    bufs: CallBuffers,
    workspace: &mut Workspace,
    tracing: &Tracing,
) -> Result<()> {
    let scratch = match grow_scratch(&mut workspace.scratch, cp.plan.scratch_len, ctx) {
        Ok(scratch) => scratch,
        Err(e) => {
            // Nothing was sent: the peers would wait for this rank until they time out.
            ctx.transport.abort(&e.message);
            return Err(e);
        }
    };
    let mut lists = std::mem::take(&mut workspace.lists);
    lists.remaining.clear();
    lists.remaining.extend_from_slice(&cp.dep_counts);
    lists.ready.clear();
    lists
        .ready
        .extend((0..cp.plan.steps.len()).filter(|&i| cp.dep_counts[i] == 0));
    lists.pending.clear();
    lists.shared_waiting.clear();
    let mut run = Run {
        cp,
        ctx,
        bufs,
        scratch,
        remaining: lists.remaining,
        ready: lists.ready,
        pending: lists.pending,
        shared_waiting: lists.shared_waiting,
        completed: lists.completed,
        slot: None,
        done: 0,
        timer: tracing
            .recorder()
            .map(|r| r.call(ctx.sig, ctx.comm, ctx.seq, cp.plan.steps.len())),
    };
    let flight = tracing
        .flight
        .begin(ctx.comm, ctx.seq, ctx.sig, cp.plan.steps.len());
    let result = run.drive().and_then(|()| run.finish());
    let pending = result.is_err().then(|| run.pending_steps(8));
    tracing.flight.end(flight, run.done, pending);
    if let Some(timer) = run.timer.take() {
        timer.finish(result.is_err());
    }
    workspace.lists = Lists {
        remaining: run.remaining,
        ready: run.ready,
        pending: run.pending,
        shared_waiting: run.shared_waiting,
        completed: run.completed,
    };
    if let Err(e) = &result {
        // Tell the peers, so nobody waits for a rank that has given up. An
        // abort received is passed on too: the aborting rank's own frames
        // may reach a peer after this rank's exit closed its connection,
        // and only a connection's own frames arrive in order.
        if e.kind != ErrorKind::InvalidArgument {
            ctx.transport.abort(&e.message);
        }
    }
    result
}

/// Grows the reusable scratch to `elements` of the call's dtype. Fails
/// instead of aborting the process when the memory is not there: a
/// registered algorithm's scratch is within `CallShape::max_scratch`, which
/// may still be more than the machine has.
fn grow_scratch(scratch: &mut Vec<u64>, elements: usize, ctx: &CallContext) -> Result<*mut u8> {
    let out_of_memory = || {
        let what = format!("no memory for the plan's {elements} elements of scratch");
        Error::new(
            ErrorKind::OutOfMemory,
            format!("{}: {what}", (ctx.describe)()),
        )
    };
    let bytes = elements.checked_mul(ctx.dtype.size());
    let words = bytes.ok_or_else(out_of_memory)?.div_ceil(8);
    if scratch.len() < words {
        let more = words - scratch.len();
        scratch
            .try_reserve_exact(more)
            .map_err(|_| out_of_memory())?;
        scratch.resize(words, 0);
    }
    Ok(scratch.as_mut_ptr() as *mut u8)
}

impl Run<'_> {
    fn drive(&mut self) -> Result<()> {
        let total = self.cp.plan.steps.len();
        // Since when nothing has moved; the clock is read only while waiting
        // (a small call that never waits reads it not at all).
        let mut idle_since: Option<Instant> = None;
        let blocked_after = BLOCKED_AFTER.min(self.ctx.timeout / 4);
        let mut told_blocked = false;
        loop {
            while let Some(step) = self.ready.pop_front() {
                self.post(step)?;
            }
            if self.done == total {
                return Ok(());
            }
            let moved = self
                .ctx
                .transport
                .progress()
                .map_err(|e| self.transport_error(&e))?;
            if self.reap()? || self.run_shared()? || moved {
                idle_since = None;
                told_blocked = false;
                continue;
            }
            let idle = match idle_since {
                Some(since) => since.elapsed(),
                None => {
                    idle_since = Some(Instant::now());
                    Duration::ZERO
                }
            };
            if idle > self.ctx.timeout {
                return Err(self.timeout_error());
            }
            if !told_blocked && idle >= blocked_after {
                self.ctx.transport.set_blocked(&self.blocked());
                told_blocked = true;
            }
            let waiting_since = self.timer.is_some().then(Instant::now);
            self.wait(Duration::from_millis(50))?;
            if let (Some(timer), Some(since)) = (&mut self.timer, waiting_since) {
                timer.blocked(since.elapsed());
            }
        }
    }

    /// Waits for the transport, or for the peers the shared-memory steps
    /// wait on (spinning, yielding, then sleeping; see `SharedWindow`).
    fn wait(&self, timeout: Duration) -> Result<()> {
        let t = self.ctx.transport;
        let result = match (self.shared_waiting.is_empty(), t.shared()) {
            (false, Some(w)) => {
                let mut ready = || self.shared_waiting.iter().any(|&s| self.shared_ready(w, s));
                w.wait_until(timeout, &mut ready)
            }
            _ => t.wait(timeout),
        };
        result.map_err(|e| self.transport_error(&e))
    }

    /// The call's stamp on exposed regions: peers take only this call's.
    /// Never 0 (bit 63 set): a fresh segment's entries read 0, and the first
    /// call of the first communicator (comm 0, seq 0) must not find them
    /// "exposed". The low 32 bits stay the call's sequence number (errors
    /// report it); communicator ids are counters far below 2^31.
    fn stamp(&self) -> u64 {
        (1 << 63) | (u64::from(self.ctx.comm) << 32) | u64::from(self.ctx.seq)
    }

    fn window(&self, step: usize) -> Result<&dyn SharedWindow> {
        match self.ctx.transport.shared() {
            Some(w) if w.can_read_all() => Ok(w),
            _ => Err(Error::invalid(format!(
                "{} step {step}: the algorithm reads peers' memory, which needs every rank on \
                 this host over shm with process_vm_readv permitted (same user, Yama \
                 ptrace_scope 0 or 1)",
                (self.ctx.describe)()
            ))),
        }
    }

    /// Whether a waiting shared-memory step can run now.
    fn shared_ready(&self, w: &dyn SharedWindow, step: usize) -> bool {
        match self.cp.plan.steps[step].op {
            Op::Release { flag, reads } => w.reads_done(flag).is_ok_and(|n| n >= reads),
            Op::Expose { .. } => !w.slot_busy(),
            ref op => {
                let (peer, flag, ..) = op.read_peer().expect("a shared-memory read");
                let stamp = self.stamp();
                let exposed = w.exposed(self.global(peer), flag, stamp, &self.ctx.sig);
                !matches!(exposed, Ok(None))
            }
        }
    }

    /// Runs the waiting shared-memory steps that can go; whether any did.
    fn run_shared(&mut self) -> Result<bool> {
        if self.shared_waiting.is_empty() {
            return Ok(false);
        }
        let mut any = false;
        let mut i = 0;
        while i < self.shared_waiting.len() {
            let step = self.shared_waiting[i];
            if self.try_shared(step)? {
                self.shared_waiting.swap_remove(i);
                self.complete(step);
                any = true;
            } else {
                i += 1;
            }
        }
        Ok(any)
    }

    /// Runs a read or Release if its peer is there; whether it ran.
    fn try_shared(&mut self, step: usize) -> Result<bool> {
        let w = self.window(step)?;
        let fail = |e: shoal_transport::TransportError| self.step_error(step, &e);
        let op = self.cp.plan.steps[step].op.clone();
        match op {
            Op::Release { flag, reads } => match self.slot {
                // The slot's readers are awaited when it is reused instead.
                Some((f, index)) if f == flag => {
                    w.slot_release(index, reads).map_err(fail)?;
                    return Ok(true);
                }
                _ => return Ok(w.reads_done(flag).map_err(fail)? >= reads),
            },
            Op::Expose { flag, src, .. } => return self.expose_slot(step, flag, src),
            _ => {}
        }
        let (peer, flag, offset, dst, reduce) = op.read_peer().expect("a shared-memory read");
        let g = self.global(peer);
        let found = w.exposed(g, flag, self.stamp(), &self.ctx.sig);
        let Some(found) = found.map_err(fail)? else {
            return Ok(false);
        };
        let esize = self.ctx.dtype.size();
        let (d, len) = self.resolve(dst);
        let exposed = found.len();
        if (offset * esize) + len > exposed {
            return Err(Error::invalid(format!(
                "{} step {step}: reads {len} bytes at {} of the {exposed} bytes rank {g} exposed",
                (self.ctx.describe)(),
                offset * esize
            )));
        }
        // SAFETY: dst is in bounds (resolve) and written only by this step.
        let dst = unsafe { std::slice::from_raw_parts_mut(d, len) };
        match found {
            Exposed::Slot { data, .. } => {
                // SAFETY: the peer's slot holds `exposed` bytes (bounds
                // checked above) and keeps them until this read is counted.
                let src = unsafe { std::slice::from_raw_parts(data.add(offset * esize), len) };
                if reduce {
                    reduce_into(self.ctx.dtype, self.ctx.op, dst, src);
                } else {
                    dst.copy_from_slice(src);
                }
            }
            Exposed::Memory { addr, .. } => {
                let addr = addr + (offset * esize) as u64;
                if reduce {
                    self.read_reduce(w, g, addr, dst).map_err(fail)?;
                } else {
                    w.read(g, addr, dst).map_err(fail)?;
                }
            }
        }
        w.read_done(g, flag, found.slot()).map_err(fail)?;
        Ok(true)
    }

    /// Exposes `src` through this rank's slot, or in place when it does not
    /// fit; whether it could (false: the slot is still being read).
    fn expose_slot(&mut self, step: usize, flag: u32, src: Region) -> Result<bool> {
        let w = self.window(step)?;
        let fail = |e: shoal_transport::TransportError| self.step_error(step, &e);
        let (s, len) = self.resolve(src);
        // SAFETY: the region lies inside its buffer (resolve).
        let bytes = unsafe { std::slice::from_raw_parts(s as *const u8, len) };
        match w.expose_slot(flag, self.stamp(), &self.ctx.sig, bytes) {
            Ok(SlotExpose::Placed(index)) => self.slot = Some((flag, index)),
            Ok(SlotExpose::Busy) => return Ok(false),
            Ok(SlotExpose::TooBig) => {
                w.expose(flag, self.stamp(), &self.ctx.sig, s as u64, len)
                    .map_err(fail)?;
            }
            Err(e) => return Err(fail(e)),
        }
        Ok(true)
    }

    /// `dst (op)= peer's bytes at addr`, a cache-sized piece at a time, so
    /// each piece is reduced while it is still in cache.
    fn read_reduce(
        &self,
        w: &dyn SharedWindow,
        peer: usize,
        addr: u64,
        dst: &mut [u8],
    ) -> shoal_transport::Result<()> {
        let esize = self.ctx.dtype.size();
        let piece = (READ_PIECE / esize).max(1) * esize;
        let mut stage = vec![0u8; piece.min(dst.len())];
        for (i, d) in dst.chunks_mut(piece).enumerate() {
            let s = &mut stage[..d.len()];
            w.read(peer, addr + (i * piece) as u64, s)?;
            reduce_into(self.ctx.dtype, self.ctx.op, d, s);
        }
        Ok(())
    }

    /// Tells the transport the call is over (its late messages are mismatches).
    fn finish(&self) -> Result<()> {
        let c = self.ctx;
        c.transport
            .finish_call(c.comm, c.seq, c.sig)
            .map_err(|e| self.transport_error(&e))
    }

    /// What the call waits for: the ranks of its pending requests.
    fn blocked(&self) -> Blocked {
        let steps = &self.cp.plan.steps;
        let mut on = Vec::new();
        let waiting = self.pending.iter().map(|&(_, s)| s);
        for s in waiting.chain(self.shared_waiting.iter().copied()) {
            if let Some((peer, _)) = peer_of(&steps[s].op) {
                let g = self.global(peer);
                if !on.contains(&g) {
                    on.push(g);
                }
            }
        }
        // A Release waits for whichever peers read the region: any of them.
        let releasing = (self.shared_waiting.iter())
            .any(|&s| matches!(steps[s].op, Op::Release { .. } | Op::Expose { .. }));
        if releasing {
            let me = self.global(self.cp.plan.rank);
            for &g in self.ctx.members.iter().filter(|&&g| g != me) {
                if !on.contains(&g) {
                    on.push(g);
                }
            }
        }
        let step = self
            .pending
            .first()
            .and_then(|&(_, s)| peer_of(&steps[s].op));
        Blocked {
            tag: self.tag(step.map_or(0, |(_, tag)| tag)),
            sig: self.ctx.sig,
            on,
        }
    }

    /// Tests every in-flight request; returns whether any completed.
    fn reap(&mut self) -> Result<bool> {
        let mut completed = std::mem::take(&mut self.completed);
        completed.clear();
        let mut i = 0;
        while i < self.pending.len() {
            let (req, step) = self.pending[i];
            let finished = self
                .ctx
                .transport
                .test(req)
                .map_err(|e| self.step_error(step, &e))?;
            if finished {
                completed.push(step);
                self.pending.swap_remove(i);
            } else {
                i += 1;
            }
        }
        let any = !completed.is_empty();
        for &step in &completed {
            self.complete(step);
        }
        self.completed = completed;
        Ok(any)
    }

    fn complete(&mut self, step: usize) {
        if let Some(timer) = &mut self.timer {
            let (kind, peer, elements) = step_summary(&self.cp.plan.steps[step].op);
            let peer = peer.map(|p| self.ctx.members[p]);
            timer.completed(step, kind, peer, elements * self.ctx.dtype.size());
        }
        self.done += 1;
        for &next in &self.cp.dependents[step] {
            self.remaining[next] -= 1;
            if self.remaining[next] == 0 {
                self.ready.push_back(next);
            }
        }
    }

    fn post(&mut self, step: usize) -> Result<()> {
        if let Some(timer) = &mut self.timer {
            timer.posted(step);
        }
        let op = &self.cp.plan.steps[step].op;
        let t = self.ctx.transport;
        match *op {
            Op::Copy { src, dst } => {
                let (s, len) = self.resolve(src);
                let (d, _) = self.resolve(dst);
                if s != d {
                    // SAFETY: both regions lie inside their buffers (checked by resolve);
                    // ptr::copy tolerates overlap.
                    unsafe { std::ptr::copy(s, d, len) };
                }
                self.complete(step);
            }
            Op::Reduce { src, dst } => {
                let (s, len) = self.resolve(src);
                let (d, _) = self.resolve(dst);
                // SAFETY: regions are in bounds; plans never reduce a region into itself.
                let (d, s) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(d, len),
                        std::slice::from_raw_parts(s, len),
                    )
                };
                reduce_into(self.ctx.dtype, self.ctx.op, d, s);
                self.complete(step);
            }
            Op::Send { peer, tag, src } => {
                let (s, len) = self.resolve(src);
                let (peer, tag) = (self.global(peer), self.tag(tag));
                let call_bytes = self.bufs.input_bytes.max(self.bufs.output_bytes);
                // SAFETY: the region stays untouched until the request completes
                // (steps that write it depend on this one).
                let req = unsafe { t.isend(peer, tag, self.ctx.sig, s, len, call_bytes) }
                    .map_err(|e| self.step_error(step, &e))?;
                self.pending.push((req, step));
            }
            Op::Recv { peer, tag, dst } => {
                let (d, len) = self.resolve(dst);
                let into = RecvInto::Buffer { dst: d, len };
                self.post_recv(step, peer, tag, into)?;
            }
            Op::RecvReduce { peer, tag, dst } => {
                let (d, len) = self.resolve(dst);
                let into = RecvInto::Sink {
                    len,
                    sink: reducing_sink(SendPtr(d), len, self.ctx),
                };
                self.post_recv(step, peer, tag, into)?;
            }
            Op::Expose { slot: true, .. } => self.post_shared(step)?,
            Op::Expose { flag, src, .. } => {
                let (s, len) = self.resolve(src);
                let w = self.window(step)?;
                w.expose(flag, self.stamp(), &self.ctx.sig, s as u64, len)
                    .map_err(|e| self.step_error(step, &e))?;
                self.complete(step);
            }
            Op::PeerRead { .. } | Op::PeerReadReduce { .. } | Op::Release { .. } => {
                self.post_shared(step)?
            }
        }
        Ok(())
    }

    /// Runs a shared-memory step now, or parks it until its peer is there.
    fn post_shared(&mut self, step: usize) -> Result<()> {
        if self.try_shared(step)? {
            self.complete(step);
        } else {
            self.shared_waiting.push(step);
        }
        Ok(())
    }

    fn post_recv(&mut self, step: usize, peer: usize, tag: u32, into: RecvInto) -> Result<()> {
        let t = self.ctx.transport;
        // SAFETY: the destination region is written only by this request until it completes.
        let req = unsafe { t.irecv(self.global(peer), self.tag(tag), self.ctx.sig, into) }
            .map_err(|e| self.step_error(step, &e))?;
        self.pending.push((req, step));
        Ok(())
    }

    /// The address and byte length of a region, bounds-checked.
    fn resolve(&self, r: Region) -> (*mut u8, usize) {
        let esize = self.ctx.dtype.size();
        let (base, cap) = match r.buf {
            Buf::Input => (self.bufs.input as *mut u8, self.bufs.input_bytes),
            Buf::Output => (self.bufs.output, self.bufs.output_bytes),
            Buf::Scratch => (self.scratch, self.cp.plan.scratch_len * esize),
        };
        let (start, len) = (r.offset * esize, r.len * esize);
        assert!(
            start + len <= cap,
            "plan region {r:?} outside its buffer of {cap} bytes"
        );
        // SAFETY: start is within the buffer (asserted above).
        (unsafe { base.add(start) }, len)
    }

    fn global(&self, peer: usize) -> usize {
        self.ctx.members[peer]
    }

    fn tag(&self, step: u32) -> Tag {
        Tag {
            comm: self.ctx.comm,
            seq: self.ctx.seq,
            step,
        }
    }

    fn transport_error(&self, e: &shoal_transport::TransportError) -> Error {
        Error::from_transport(e, &(self.ctx.describe)())
    }

    fn step_error(&self, step: usize, e: &shoal_transport::TransportError) -> Error {
        let what = describe_step(&self.cp.plan.steps[step].op, self.ctx.members);
        Error::from_transport(
            e,
            &format!("{} step {step} ({what})", (self.ctx.describe)()),
        )
    }

    /// The call timed out: names what it waits on and, after asking around
    /// (see [`crate::stall`]), the ranks that stopped. A failure that
    /// arrives meanwhile (another rank's abort) is the error instead.
    fn timeout_error(&self) -> Error {
        let blocked = self.blocked();
        let me = self.global(self.cp.plan.rank);
        let patience = answer_time(self.ctx.timeout);
        let stall = match Stall::find(self.ctx.transport, me, &blocked.on, patience) {
            Ok(stall) => stall,
            Err(e) => return self.transport_error(&e),
        };
        let mut e = self.waiting_error();
        let found = stall.describe();
        if !found.is_empty() {
            e.message = format!("{}; {found}", e.message);
        }
        e
    }

    fn waiting_error(&self) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "{}: no progress for {:.0?}, the timeout of its communicator (SHOAL_TIMEOUT unless set); waiting on {}",
                (self.ctx.describe)(),
                self.ctx.timeout,
                self.pending_steps(4)
            ),
        )
    }

    /// The first `n` steps in flight, e.g. `step 3 (recv 10 elements from rank 2)`.
    fn pending_steps(&self, n: usize) -> String {
        let steps: Vec<usize> = (self.pending.iter().map(|&(_, s)| s))
            .chain(self.shared_waiting.iter().copied())
            .collect();
        if steps.is_empty() {
            return "none".into();
        }
        let waiting: Vec<String> = steps
            .iter()
            .take(n)
            .map(|&s| {
                format!(
                    "step {s} ({})",
                    describe_step(&self.cp.plan.steps[s].op, self.ctx.members)
                )
            })
            .collect();
        let more = steps.len().saturating_sub(n);
        if more > 0 {
            return format!("{} and {more} more", waiting.join(", "));
        }
        waiting.join(", ")
    }
}

/// A sink that reduces each arriving piece into the destination region.
fn reducing_sink(dst: SendPtr, len: usize, ctx: &CallContext) -> shoal_transport::Sink {
    let (dtype, op) = (ctx.dtype, ctx.op);
    Box::new(move |offset: usize, bytes: &[u8]| {
        let dst = dst;
        assert!(
            offset + bytes.len() <= len,
            "incoming piece beyond the receive region"
        );
        // SAFETY: the region [dst, dst+len) is owned by this receive until it completes.
        let d = unsafe { std::slice::from_raw_parts_mut(dst.0.add(offset), bytes.len()) };
        reduce_into(dtype, op, d, bytes);
    })
}

/// The peer and message tag of a send or receive step.
fn peer_of(op: &Op) -> Option<(usize, u32)> {
    match *op {
        Op::Send { peer, tag, .. }
        | Op::Recv { peer, tag, .. }
        | Op::RecvReduce { peer, tag, .. } => Some((peer, tag)),
        Op::PeerRead { peer, .. } | Op::PeerReadReduce { peer, .. } => Some((peer, 0)),
        Op::Copy { .. } | Op::Reduce { .. } | Op::Expose { .. } | Op::Release { .. } => None,
    }
}

/// What a step does, with whom (group rank) and on how many elements.
fn step_summary(op: &Op) -> (StepKind, Option<usize>, usize) {
    match *op {
        Op::Send { peer, src, .. } => (StepKind::Send, Some(peer), src.len),
        Op::Recv { peer, dst, .. } => (StepKind::Recv, Some(peer), dst.len),
        Op::RecvReduce { peer, dst, .. } => (StepKind::RecvReduce, Some(peer), dst.len),
        Op::Copy { src, .. } => (StepKind::Copy, None, src.len),
        Op::Reduce { src, .. } => (StepKind::Reduce, None, src.len),
        Op::Expose { src, .. } => (StepKind::Expose, None, src.len),
        Op::PeerRead { peer, dst, .. } => (StepKind::PeerRead, Some(peer), dst.len),
        Op::PeerReadReduce { peer, dst, .. } => (StepKind::PeerReadReduce, Some(peer), dst.len),
        Op::Release { .. } => (StepKind::Release, None, 0),
    }
}

fn describe_step(op: &Op, members: &[usize]) -> String {
    match op {
        Op::Send { peer, src, .. } => {
            format!("send {} elements to rank {}", src.len, members[*peer])
        }
        Op::Recv { peer, dst, .. } => {
            format!("recv {} elements from rank {}", dst.len, members[*peer])
        }
        Op::RecvReduce { peer, dst, .. } => {
            format!(
                "recv-reduce {} elements from rank {}",
                dst.len, members[*peer]
            )
        }
        Op::Copy { src, .. } => format!("copy {} elements", src.len),
        Op::Reduce { src, .. } => format!("reduce {} elements", src.len),
        Op::Expose { flag, src, slot } => {
            let via = if *slot { " through its slot" } else { "" };
            format!("expose {} elements as flag {flag}{via}", src.len)
        }
        Op::PeerRead {
            peer, flag, dst, ..
        } => format!(
            "read {} elements of rank {}'s flag {flag}",
            dst.len, members[*peer]
        ),
        Op::PeerReadReduce {
            peer, flag, dst, ..
        } => format!(
            "read-reduce {} elements of rank {}'s flag {flag}",
            dst.len, members[*peer]
        ),
        Op::Release { flag, reads } => {
            format!("wait for {reads} peer reads of flag {flag}")
        }
    }
}
