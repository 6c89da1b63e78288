//! Communicators: a group of ranks sharing one transport, issuing collectives
//! and point-to-point messages. The world communicator and every sub-group
//! made by `new_group` share one [`Engine`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use shoal_plan::{Buf, CallShape, Collective};
use shoal_transport::CallSig;

use crate::alias::{self, InPlace};
use crate::dtype::{DType, ReduceOp};
use crate::error::Result;
use crate::exec::{CallBuffers, CompiledPlan};
use crate::ina::{Membership, ShardJob};
use crate::provider::Named;
use crate::registry::AGREEMENT_ALGO_ID;
use crate::select::PlanSource;
use crate::work::Work;

mod adapt;
mod agreed;
mod decide;
mod engine;
mod group;
mod inspect;
mod p2p;
mod providers;
mod shape;

/// Declares each provider's file (a module beside this one) and lists it in
/// `PROVIDERS`: so a provider is registered by its one line below.
macro_rules! providers {
    ($($(#[$only:meta])* $file:ident::$provider:ident,)*) => {
        $($(#[$only])* mod $file;)*
        /// Every provider of collectives, each described in its file; the
        /// order breaks ties between prices, and the plan executor comes
        /// first (`ProviderId::PLANS`).
        static PROVIDERS: &[&dyn providers::CallProvider] = &[$($(#[$only])* &$file::$provider,)*];
    };
}

providers! {
    plans::PLANS,
    switch::SWITCH,
    hierarchical_switch::HIERARCHICAL_SWITCH,
    #[cfg(test)] gather_reduce::GATHER_REDUCE,
}

use adapt::Adapted;
use agreed::{Agreed, FirstUse, Verdict};
use decide::{Adapting, Decided, Decisions};
pub use engine::Engine;
use shape::{block_layout, busiest_host, kind_of, sig_count};

/// Sequence numbers with this bit set belong to point-to-point messages.
const P2P_SEQ: u32 = 1 << 31;
/// The signature kind of point-to-point messages.
const P2P_KIND: u8 = CallSig::P2P_KIND;

/// Arguments of one collective call. `count` is the per-rank block size,
/// or `counts` the per-rank ones (allgather, reduce_scatter: one per rank;
/// alltoall: the `world x world` matrix); see the buffer contract in
/// `shoal_plan::CallShape`.
#[derive(Clone, Debug)]
pub struct CollArgs {
    pub collective: Collective,
    pub count: usize,
    pub counts: Option<Arc<[usize]>>,
    pub dtype: DType,
    pub op: ReduceOp,
    pub root: usize,
    /// The algorithm the caller named, resolved where the call was made.
    pub algorithm: Option<Named>,
}

impl CollArgs {
    /// A call of `count` elements of `dtype`, with the defaults the
    /// collectives without them ignore: sum, root 0, the selector's choice.
    pub fn new(collective: Collective, count: usize, dtype: DType) -> CollArgs {
        CollArgs {
            collective,
            count,
            counts: None,
            dtype,
            op: ReduceOp::Sum,
            root: 0,
            algorithm: None,
        }
    }
}

/// Per-communicator mutable state.
#[derive(Default)]
struct CommState {
    /// How each call shape runs, decided at its first call.
    decisions: Decisions,
    /// The verdicts of the first-use agreements, per call shape and algorithm.
    agreed: Agreed,
    /// The measurements of the shapes whose calls choose as they run.
    adapting: Adapting,
    seq: u32,
    /// The `history` of the next call's signature (see `CallSig::history`).
    history: u32,
    groups_made: u32,
    /// Groups made with a key, per (key, members): see `new_group`.
    keyed_made: HashMap<(String, Vec<usize>), u32>,
    /// Next message index per (peer, user tag), for sends and receives apart.
    sends: HashMap<(usize, u32), u32>,
    recvs: HashMap<(usize, u32), u32>,
}

impl CommState {
    /// Takes the next sequence number of a collective call.
    fn next_seq(&mut self) -> u32 {
        let seq = self.seq;
        self.seq = (self.seq + 1) & !P2P_SEQ;
        seq
    }
}

/// A plan is the same for every communicator with the same call shape,
/// algorithm (its id) and group rank.
type PlanKey = (CallShape, u32, usize);

pub struct Communicator {
    engine: Arc<Engine>,
    /// Global rank of each member, in group order.
    members: Vec<usize>,
    rank: usize,
    id: u32,
    /// Ranks per host of the members' block layout (see `CallShape::ranks_per_host`).
    ranks_per_host: usize,
    /// The most members on one host: they share its link to a switch.
    busiest_host: usize,
    state: Mutex<CommState>,
    /// How long a call may wait without progress before it fails (nanoseconds):
    /// `SHOAL_TIMEOUT` unless set for this communicator (`set_timeout`).
    timeout_ns: AtomicU64,
    /// A sub-group's own switch job, joined at its first allreduce that
    /// could use the switch (the world's is the engine's).
    group_ina: OnceLock<Membership>,
    /// This rank's shard job of `hierarchical_ina` (joined at first use).
    shard_job: ShardJob,
}

/// Raw call buffers that may travel to the async worker thread; the job
/// also owns what keeps them valid (see `collective_async`).
struct SendBuffers(CallBuffers);
// SAFETY: see the type's doc.
unsafe impl Send for SendBuffers {}

/// How a provider runs the calls it priced: made when a call is prepared,
/// by its `CallProvider::runner`.
trait RunCall: Send {
    /// Takes the sequence numbers of the provider's own steps, in the order
    /// they run, before the call's own (under the state's lock, so that
    /// every member numbers alike).
    fn reserve(&mut self, st: &mut CommState);
    /// Runs the prepared call `p` (its first-use agreement already made).
    fn run(&self, comm: &Communicator, p: &Prepared, bufs: CallBuffers) -> Result<()>;
    /// Whether `run` waits only in the transport's wait loop (which calls
    /// the long-wait hook: [`Communicator::run_collective_holding`]).
    fn waits_only_in_transport(&self) -> bool {
        false
    }
}

/// A blocking collective prepared on the calling thread, to be run by
/// [`Communicator::run_collective`].
pub struct PreparedCall(Prepared);

/// One call prepared for execution: its plan and identity.
struct Prepared {
    cp: Arc<CompiledPlan>,
    seq: u32,
    sig: CallSig,
    collective: Collective,
    algorithm: &'static str,
    count: usize,
    counts: Option<Arc<[usize]>>,
    root: usize,
    global_rank: usize,
    op: ReduceOp,
    dtype: DType,
    divide_by: Option<usize>,
    /// How the call deals with overlapping input and output.
    in_place: InPlace,
    /// How its provider runs it, with what the provider reserved (through
    /// the switch, `cp` is the fallback plan).
    runs: Box<dyn RunCall>,
    /// At the first use of its key: the agreement to run or to wait for.
    first_use: Option<FirstUse>,
    /// Where its shape's calls choose as they run: which contender it is.
    adapted: Option<Adapted>,
}

impl Prepared {
    /// Names the call in errors; built only when one happens.
    fn describe(&self) -> String {
        let count = match &self.counts {
            Some(c) => format!("counts={c:?}"),
            None => format!("count={}", self.count),
        };
        format!(
            "{}(algorithm={}, {count}, dtype={}, op={}, root={}) on rank {}",
            self.collective, self.algorithm, self.dtype, self.op, self.root, self.global_rank
        )
    }
}

impl Communicator {
    /// The world communicator over every rank of the engine's transport.
    pub fn world(engine: Arc<Engine>) -> Communicator {
        let world = engine.transport.world();
        let rank = engine.transport.rank();
        Communicator::with_members(engine, (0..world).collect(), rank, 0)
    }

    fn with_members(
        engine: Arc<Engine>,
        members: Vec<usize>,
        rank: usize,
        id: u32,
    ) -> Communicator {
        let ranks_per_host = block_layout(&engine.host_of, &members);
        let busiest_host = busiest_host(&engine.host_of, &members);
        let timeout_ns = AtomicU64::new(duration_ns(engine.config.timeout));
        Communicator {
            engine,
            members,
            rank,
            id,
            ranks_per_host,
            busiest_host,
            timeout_ns,
            state: Mutex::new(CommState::default()),
            group_ina: OnceLock::new(),
            shard_job: ShardJob::default(),
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn size(&self) -> usize {
        self.members.len()
    }
    /// Global ranks of the members, in group order.
    pub fn members(&self) -> &[usize] {
        &self.members
    }
    /// How long this communicator's calls may wait without progress before
    /// they fail with a timeout (`SHOAL_TIMEOUT` unless set).
    pub fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed))
    }

    /// Sets this communicator's timeout (its calls from now on; not its
    /// sub-groups', which start from `SHOAL_TIMEOUT`), as `SHOAL_TIMEOUT`
    /// does for every communicator. At most a year, as `SHOAL_TIMEOUT`.
    pub fn set_timeout(&self, timeout: Duration) {
        self.timeout_ns
            .store(duration_ns(timeout), Ordering::Relaxed);
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Runs a collective and returns when it is done (built-in algorithms
    /// only: registered ones need a [`PlanSource`], see `prepare_collective`).
    pub fn collective(&self, args: &CollArgs, bufs: CallBuffers) -> Result<()> {
        let call = self.prepare_collective(args, &bufs, None)?;
        self.run_collective(call, bufs)
    }

    /// Every member's `mine` (all of one length), in rank order: the small
    /// agreements of init (the build, tracing on, tuning tables) use it. It
    /// runs a fixed built-in allgather that no setting changes (not the
    /// selector's choice), outside the first-use agreement: the agreement
    /// on the build comes before anything a build could do differently.
    pub fn allgather_bytes(&self, mine: &[u8]) -> Result<Vec<u8>> {
        self.engine.queue.flush();
        let (seq, history) = {
            let mut st = self.state.lock().unwrap();
            (st.next_seq(), st.history)
        };
        let sig = CallSig {
            kind: kind_of(Collective::Allgather),
            dtype: DType::U8.index(),
            op: 0,
            algo: AGREEMENT_ALGO_ID,
            root: 0,
            count: mine.len() as u64,
            history,
        };
        let describe = || {
            format!(
                "an agreement of {} bytes per rank on rank {}",
                mine.len(),
                self.members[self.rank]
            )
        };
        self.exchange(seq, sig, mine, &describe)
    }

    /// Every member's `mine` (all of one length), in rank order, by the
    /// ring allgather run directly (not through `prepare`) as call `seq`
    /// with signature `sig`.
    fn exchange(
        &self,
        seq: u32,
        sig: CallSig,
        mine: &[u8],
        describe: &dyn Fn() -> String,
    ) -> Result<Vec<u8>> {
        use shoal_plan::algorithms::allgather::ring::ALGORITHM as RING;
        const RING_ID: u32 = RING.id();
        // One piece per block, whatever SHOAL_CHUNK_BYTES says on each rank.
        let shape = CallShape::new(
            Collective::Allgather,
            self.size(),
            mine.len(),
            mine.len().max(1),
        );
        let rank = self.rank;
        let cp = self.cached_plan(shape, RING_ID, |s| Ok((RING.generate)(s, rank)))?;
        let mut all = vec![0u8; mine.len() * self.size()];
        let ctx = self.call_context(seq, sig, DType::U8, ReduceOp::Sum, describe);
        let bufs = CallBuffers {
            input: mine.as_ptr(),
            input_bytes: mine.len(),
            output: all.as_mut_ptr(),
            output_bytes: all.len(),
        };
        self.engine.run(&cp, &ctx, bufs)?;
        Ok(all)
    }

    /// The first half of a blocking collective, on the calling thread:
    /// checks the call, chooses the algorithm and fetches or builds its plan,
    /// asking `source` for a registered algorithm's cost and plan on a cache
    /// miss. Nothing is sent: a failure here leaves the group as it was.
    pub fn prepare_collective(
        &self,
        args: &CollArgs,
        bufs: &CallBuffers,
        source: Option<&dyn PlanSource>,
    ) -> Result<PreparedCall> {
        self.prepare(args, bufs, source).map(PreparedCall)
    }

    /// The second half: runs the prepared call and returns when it is done.
    pub fn run_collective(&self, call: PreparedCall, bufs: CallBuffers) -> Result<()> {
        self.engine.queue.flush();
        self.run_prepared(&call.0, bufs)
    }

    /// [`Communicator::run_collective`] for a caller holding a lock it would
    /// rather keep through a short call (the Python binding's GIL), which
    /// `release` lets go: called once, before anything that may block for
    /// long. Where every wait of the call is the shared-memory transport's,
    /// that is where one of them has spun for a while (see
    /// `shoal_transport::doorbell::with_long_wait_hook`); else at once (an
    /// asynchronous call still running, a first-use agreement, a provider's
    /// own steps, another transport).
    pub fn run_collective_holding(
        &self,
        call: PreparedCall,
        bufs: CallBuffers,
        release: fn(),
    ) -> Result<()> {
        let p = &call.0;
        let shared_only = self.size() == 1
            || self
                .engine
                .transport
                .shared()
                .is_some_and(|w| w.can_read_all());
        if !(shared_only
            && p.first_use.is_none()
            && p.runs.waits_only_in_transport()
            && self.engine.queue.is_idle())
        {
            release();
            return self.run_collective(call, bufs);
        }
        shoal_transport::doorbell::with_long_wait_hook(release, || self.run_prepared(p, bufs))
    }

    /// Starts a collective on the async worker and returns its work handle.
    ///
    /// `owner` keeps the buffers valid (the Python binding passes its buffer
    /// exports): the call holds it until it has finished, and drops it before
    /// its work completes, whatever happens to the handle in the meantime.
    pub fn collective_async(
        self: &Arc<Self>,
        args: &CollArgs,
        bufs: CallBuffers,
        owner: Box<dyn Send>,
        source: Option<&dyn PlanSource>,
    ) -> Result<Arc<Work>> {
        let p = self.prepare(args, &bufs, source)?;
        let me = self.clone();
        let bufs = SendBuffers(bufs);
        Ok(self.engine.queue.submit(Box::new(move || {
            let bufs = bufs;
            let result = me.run_prepared(&p, bufs.0);
            drop(owner);
            result
        })))
    }

    /// How many compiled plans this process caches, and how many it may.
    pub fn plan_cache_usage(&self) -> (usize, usize) {
        self.engine.plan_cache_usage()
    }

    /// How many call shapes this communicator has decided and remembers
    /// (for tests and tools; see `decide.rs`).
    pub fn decisions_cached(&self) -> usize {
        self.state.lock().unwrap().decisions.len()
    }

    /// Waits for every asynchronous call issued so far.
    pub fn synchronize(&self) {
        self.engine.queue.flush();
    }

    fn run_prepared(&self, p: &Prepared, bufs: CallBuffers) -> Result<()> {
        if let Some(first) = &p.first_use {
            self.agree_on_first_use(p, first)?;
        }
        let Some(adapted) = p.adapted.as_ref().filter(|a| a.timed) else {
            return p.runs.run(self, p, bufs);
        };
        let started = Instant::now();
        p.runs.run(self, p, bufs)?;
        adapted.adapt.record(adapted.index, started.elapsed());
        Ok(())
    }

    /// Validates the call, picks the algorithm, fetches or builds the plan,
    /// and takes the next sequence number.
    fn prepare(
        &self,
        args: &CollArgs,
        bufs: &CallBuffers,
        source: Option<&dyn PlanSource>,
    ) -> Result<Prepared> {
        self.engine.check_healthy()?;
        let shape = self.shape(args)?;
        if args.collective.reduces() {
            args.op.check(args.dtype)?;
        }
        self.check_buffers(&shape, args.dtype, bufs)?;
        let esize = args.dtype.size();
        let in_place = alias::classify(&shape, self.rank, esize, bufs)?;
        let op = if args.collective.reduces() {
            args.op
        } else {
            ReduceOp::Sum
        };
        let has_output = shape.buffer_len(self.rank, Buf::Output) > 0;
        let divide_by = (op == ReduceOp::Avg && has_output).then_some(self.size());
        let mut sig = CallSig {
            kind: kind_of(args.collective),
            dtype: args.dtype.index(),
            op: op.index(),
            algo: 0, // the decision's, below
            root: args.root as u32,
            count: sig_count(&shape),
            history: 0,
        };
        // A call of a known shape reads its decision under the state's lock,
        // kept for its sequence numbers.
        let (
            Decided {
                mut decision,
                mut cp,
                mut runs,
                shape,
                adapt,
            },
            mut st,
        ) = self.decided(args, shape, op, source)?;
        let adapted = match adapt {
            None => None,
            Some(adapt) => {
                let (adapted, locked) = self.next_contender(adapt, st)?;
                st = locked;
                if adapted.index != 0 {
                    let choice = adapted.adapt.contender(adapted.index);
                    cp = (adapted.adapt)
                        .plan(adapted.index, || self.plan(shape.clone(), choice, source))?;
                    decision.run_by(choice);
                }
                Some(adapted)
            }
        };
        sig.algo = decision.sig_algo;
        let counts = shape.counts.clone();
        let key = (shape, sig.algo, decision.plan_id);
        // One lookup for a key agreed on; the first use of a key makes its
        // record (a registered algorithm's digest: Python) unlocked.
        let known = (self.size() > 1).then(|| st.agreed.0.get(&key));
        let mut first_use = match known {
            None => None, // one rank agrees with itself
            Some(Some(verdict)) if matches!(verdict.get(), Some(Ok(()))) => None,
            Some(Some(verdict)) => Some(FirstUse::Await { verdict, key }),
            Some(None) => {
                drop(st);
                let record = self.first_use_record(&key, decision.choice, source)?;
                st = self.state.lock().unwrap();
                let verdict = Verdict::default();
                st.agreed.0.insert(key, verdict.clone());
                Some(FirstUse::Run {
                    seq: 0, // taken below, in order
                    record,
                    verdict,
                })
            }
        };
        // Every member folds the same calls in the same order.
        sig.history = st.history;
        st.history = sig.next_history();
        // Numbered in the order they run (the transport counts a call's
        // messages as late once a later call finished): the first-use
        // agreement; the provider's own steps (the host phases of
        // `hierarchical_ina`, the agreement on the switch's outcome); then
        // the host plan, which through the switch runs only if it failed.
        if let Some(FirstUse::Run { seq, .. }) = &mut first_use {
            *seq = st.next_seq();
        }
        runs.reserve(&mut st);
        let seq = st.next_seq();
        drop(st);
        let algorithm = decision.name;
        tracing::debug!(comm = self.id, seq, count = args.count, dtype = %args.dtype, "{} runs {algorithm}", args.collective);
        Ok(Prepared {
            cp,
            seq,
            sig,
            collective: args.collective,
            algorithm,
            count: args.count,
            counts,
            root: args.root,
            global_rank: self.members[self.rank],
            op,
            dtype: args.dtype,
            divide_by,
            in_place,
            runs,
            first_use,
            adapted,
        })
    }
}

/// A timeout in nanoseconds, at most a year (as `SHOAL_TIMEOUT`): every
/// deadline (now + timeout) stays representable.
fn duration_ns(t: Duration) -> u64 {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
    t.min(YEAR).as_nanos() as u64
}
