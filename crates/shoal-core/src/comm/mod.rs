//! Communicators: a group of ranks sharing one transport, issuing collectives
//! and point-to-point messages. The world communicator and every sub-group
//! made by `new_group` share one [`Engine`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use shoal_plan::{Buf, CallShape, Collective};
use shoal_transport::{CallSig, Transport};

use crate::agree::first_use;
use crate::alias::{self, InPlace, Staging};
use crate::config::Config;
use crate::dtype::{DType, ReduceOp};
use crate::error::{describe_call, Error, ErrorKind, Result};
use crate::exec::{execute, CallBuffers, CallContext, CompiledPlan, Workspace};
use crate::fnv::Fnv64;
use crate::ina::{
    self, Ina, ShardJob, HIERARCHICAL_INA, HIERARCHICAL_INA_ALGO_ID, INA, INA_ALGO_ID,
};
use crate::lru::Lru;
use crate::provider::{self, HierarchicalSwitch, PlanExecutor, ProviderId, Switch};
use crate::select::{Choice, PlanSource, Selector};
use crate::trace::Tracing;
use crate::work::{AsyncQueue, Work};

mod group;
mod hierarchical_switch;
mod p2p;
mod plans;
mod switch;

/// Sequence numbers with this bit set belong to point-to-point messages.
const P2P_SEQ: u32 = 1 << 31;
/// The signature kind of point-to-point messages.
const P2P_KIND: u8 = CallSig::P2P_KIND;

pub use crate::registry::{AGREEMENT, AGREEMENT_ALGO_ID};

/// Call shapes whose agreement a communicator remembers (see `first_use`).
/// A constant, not a setting: every member's cache must forget alike.
const AGREED_CACHED: usize = 1024;

/// What the ranks of one process share: the transport and the execution lock.
pub struct Engine {
    pub transport: Box<dyn Transport>,
    pub config: Config,
    pub selector: Selector,
    /// Global ranks sharing this process's host.
    pub local_ranks: Vec<usize>,
    /// Host index of every global rank.
    pub host_of: Vec<usize>,
    /// This rank's membership in the switch job, or why there is none.
    pub ina: std::result::Result<Ina, String>,
    /// Held while a plan runs (the transport is driven by one thread at a
    /// time); guards the reusable scratch memory.
    scratch: Mutex<Workspace>,
    /// Compiled plans of every communicator of this process, bounded by
    /// `SHOAL_PLAN_CACHE` (a program may use endless distinct counts).
    plans: Mutex<Lru<PlanKey, Arc<CompiledPlan>>>,
    /// Where in-place calls put their input or output aside (see `alias`).
    staging: Staging,
    queue: AsyncQueue,
    /// The caller's contribution during an in-network allreduce (for the fallback).
    ina_backup: Mutex<Vec<u8>>,
    /// The first fatal error; after it every call fails fast with it.
    failed: Mutex<Option<Error>>,
    /// The trace (`SHOAL_TRACE`) and the flight recorder.
    pub tracing: Tracing,
    /// Keeps whatever the transport needs alive (store, store server).
    _keepalive: Vec<Box<dyn std::any::Any + Send + Sync>>,
}

impl Engine {
    pub fn new(
        transport: Box<dyn Transport>,
        config: Config,
        selector: Selector,
        local_ranks: Vec<usize>,
        host_of: Vec<usize>,
        ina: std::result::Result<Ina, String>,
        keepalive: Vec<Box<dyn std::any::Any + Send + Sync>>,
    ) -> Engine {
        let plans = Mutex::new(Lru::new(config.plan_cache));
        let tracing = Tracing::new(config.flight_recorder);
        Engine {
            transport,
            config,
            selector,
            local_ranks,
            host_of,
            ina,
            scratch: Mutex::new(Workspace::default()),
            plans,
            staging: Staging::default(),
            queue: AsyncQueue::new(),
            ina_backup: Mutex::new(Vec::new()),
            failed: Mutex::new(None),
            tracing,
            _keepalive: keepalive,
        }
    }

    /// How many compiled plans are cached, and how many may be.
    pub fn plan_cache_usage(&self) -> (usize, usize) {
        let plans = self.plans.lock().unwrap();
        (plans.len(), plans.capacity())
    }

    fn check_healthy(&self) -> Result<()> {
        match &*self.failed.lock().unwrap() {
            Some(e) => Err(Error::new(
                e.kind,
                format!(
                    "communicator is unusable after an earlier failure: {}",
                    e.message
                ),
            )),
            None => Ok(()),
        }
    }

    fn run(&self, cp: &CompiledPlan, ctx: &CallContext, bufs: CallBuffers) -> Result<()> {
        self.check_healthy()?;
        let mut scratch = self.scratch.lock().unwrap();
        let mut r = execute(cp, ctx, bufs, &mut scratch, &self.tracing);
        if let Err(e) = &mut r {
            if e.kind != ErrorKind::InvalidArgument {
                crate::trace::dump_flight(&self.tracing, self.transport.rank(), e);
                self.failed.lock().unwrap().get_or_insert_with(|| e.clone());
            }
        }
        r
    }
}

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
    pub algorithm: Option<String>,
}

/// Per-communicator mutable state.
#[derive(Default)]
struct CommState {
    /// The verdicts of the first-use agreements, per call shape and algorithm.
    agreed: Agreed,
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

/// What the ranks agree on at the first use: a call shape, who runs it (the
/// id in its signature) and the host algorithm (the plan, or the switch's
/// fallback).
type AgreeKey = (CallShape, u32, u32);

/// The ranks' verdict on one [`AgreeKey`], set by the call that ran the
/// agreement; later calls of the key prepared before it ran read it then.
type Verdict = Arc<OnceLock<Result<()>>>;

/// The verdicts of a communicator, bounded: a program may use endless
/// distinct counts, and a forgotten shape is only agreed on again.
struct Agreed(Lru<AgreeKey, Verdict>);

impl Default for Agreed {
    fn default() -> Agreed {
        Agreed(Lru::new(AGREED_CACHED))
    }
}

/// A call's part in the first-use agreement of its key.
enum FirstUse {
    /// This call runs it, as sequence number `seq`, contributing `record`.
    Run {
        seq: u32,
        record: [u8; first_use::RECORD],
        verdict: Verdict,
    },
    /// An earlier call of the key runs it; this one reads its verdict.
    Await { verdict: Verdict, key: AgreeKey },
}

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
    group_ina: OnceLock<std::result::Result<Ina, String>>,
    /// This rank's shard job of `hierarchical_ina` (joined at first use).
    shard_job: ShardJob,
}

/// Raw call buffers that may travel to the async worker thread; the job
/// also owns what keeps them valid (see `collective_async`).
struct SendBuffers(CallBuffers);
// SAFETY: see the type's doc.
unsafe impl Send for SendBuffers {}

/// How a provider runs the calls it priced (its pricing half is in
/// `crate::provider`): made when a call is prepared, by [`Communicator::runner`].
trait RunCall: Send {
    /// Takes the sequence numbers of the provider's own steps, in the order
    /// they run, before the call's own (under the state's lock, so that
    /// every member numbers alike).
    fn reserve(&mut self, st: &mut CommState);
    /// Runs the prepared call `p` (its first-use agreement already made).
    fn run(&self, comm: &Communicator, p: &Prepared, bufs: CallBuffers) -> Result<()>;
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
        // One piece per block, whatever SHOAL_CHUNK_BYTES says on each rank.
        let shape = CallShape::new(
            Collective::Allgather,
            self.size(),
            mine.len(),
            mine.len().max(1),
        );
        let rank = self.rank;
        let cp = self.cached_plan(shape, RING.id(), |s| Ok((RING.generate)(s, rank)))?;
        let mut all = vec![0u8; mine.len() * self.size()];
        let ctx = CallContext {
            transport: &*self.engine.transport,
            members: &self.members,
            comm: self.id,
            seq,
            sig,
            dtype: DType::U8,
            op: ReduceOp::Sum,
            timeout: self.timeout(),
            describe,
        };
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

    /// The algorithm the selector picks for a call (for inspection and tests).
    pub fn choose_algorithm(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
        source: Option<&dyn PlanSource>,
    ) -> Result<String> {
        let (args, shape) = self.inspected(collective, count, dtype, root, explicit)?;
        match self.provider_for(&args, &shape, source)? {
            ProviderId::Switch => return Ok(INA.to_string()),
            ProviderId::HierarchicalSwitch => return Ok(HIERARCHICAL_INA.to_string()),
            ProviderId::Plans => {}
        }
        let explicit = explicit.filter(|&a| !ina::is_switch_algorithm(a));
        let choice = self
            .engine
            .selector
            .choose(&shape, dtype.size(), explicit, source)?;
        Ok(choice.name().to_string())
    }

    /// How many steps this rank's plan of a call has, run by the host
    /// algorithm the selector picks (for inspection and tests: a trace has
    /// one event per executed step).
    pub fn plan_steps(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
        source: Option<&dyn PlanSource>,
    ) -> Result<usize> {
        let (_, shape) = self.inspected(collective, count, dtype, root, explicit)?;
        let choice = self
            .engine
            .selector
            .choose(&shape, dtype.size(), explicit, source)?;
        Ok(self.plan(shape, choice, source)?.plan.steps.len())
    }

    /// The arguments and shape of a call that is inspected, not run
    /// (`choose_algorithm`, `plan_steps`).
    fn inspected(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
    ) -> Result<(CollArgs, CallShape)> {
        let args = CollArgs {
            collective,
            count,
            counts: None,
            dtype,
            op: ReduceOp::Sum,
            root,
            algorithm: explicit.map(str::to_string),
        };
        let shape = self.shape(&args)?;
        Ok((args, shape))
    }

    /// Waits for every asynchronous call issued so far.
    pub fn synchronize(&self) {
        self.engine.queue.flush();
    }

    fn run_prepared(&self, p: &Prepared, bufs: CallBuffers) -> Result<()> {
        if let Some(first) = &p.first_use {
            self.agree_on_first_use(p, first)?;
        }
        p.runs.run(self, p, bufs)
    }

    /// The first-use agreement of a call's key (`agree::first_use`), in
    /// call order on the thread that runs the call: the first call of the
    /// key gathers every rank's record and keeps the verdict; calls of the
    /// key prepared before it ran read the verdict. Nothing of the call
    /// itself has been sent yet, so a disagreement leaves the group usable
    /// (the same error on every rank).
    fn agree_on_first_use(&self, p: &Prepared, first: &FirstUse) -> Result<()> {
        match first {
            FirstUse::Run {
                seq,
                record,
                verdict,
            } => {
                let sig = CallSig {
                    algo: AGREEMENT_ALGO_ID,
                    ..p.sig
                };
                let describe = || format!("the agreement at the first use of {}", p.describe());
                let outcome = self.exchange(*seq, sig, record, &describe).and_then(|all| {
                    let call = describe_call(&p.sig);
                    first_use::verdict(&all, &self.members, p.collective, &call)
                });
                let _ = verdict.set(outcome.clone());
                outcome
            }
            FirstUse::Await { verdict, key } => match verdict.get() {
                Some(outcome) => outcome.clone(),
                None => {
                    // The call that was to agree ended before it did: forget
                    // the key, so that the next call of it agrees again.
                    let mut st = self.state.lock().unwrap();
                    if st
                        .agreed
                        .0
                        .peek(key)
                        .is_some_and(|v| Arc::ptr_eq(v, verdict))
                    {
                        st.agreed.0.remove(key);
                    }
                    Err(Error::runtime(format!(
                        "{}: the first call of this shape ended before the ranks agreed on what it runs; \
                         the next call of it agrees again",
                        p.describe()
                    )))
                }
            },
        }
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
        let explicit = args.algorithm.as_deref();
        self.join_group_switch(args);
        let provider = self.provider_for(args, &shape, source)?;
        let provider = self.retry_switch(args, provider);
        let host_choice = explicit.filter(|&a| !ina::is_switch_algorithm(a));
        let choice = self
            .engine
            .selector
            .choose(&shape, esize, host_choice, source)?;
        let algo_id = choice.id();
        let op = if args.collective.reduces() {
            args.op
        } else {
            ReduceOp::Sum
        };
        let mut sig = CallSig {
            kind: kind_of(args.collective),
            dtype: args.dtype.index(),
            op: op.index(),
            algo: match provider {
                ProviderId::Switch => INA_ALGO_ID,
                ProviderId::HierarchicalSwitch => HIERARCHICAL_INA_ALGO_ID,
                ProviderId::Plans => algo_id,
            },
            root: args.root as u32,
            count: sig_count(&shape),
            history: 0,
        };
        let has_output = shape.buffer_len(self.rank, Buf::Output) > 0;
        let divide_by = (op == ReduceOp::Avg && has_output).then_some(self.size());
        let cp = self.plan(shape.clone(), choice, source)?;
        let mut runs = self.runner(provider, &shape)?;
        let counts = shape.counts.clone();
        let key = (shape, sig.algo, algo_id);
        let mut st = self.state.lock().unwrap();
        // One lookup for a key agreed on; the first use of a key makes its
        // record (a registered algorithm's digest: Python) unlocked.
        let known = (self.size() > 1).then(|| st.agreed.0.get(&key));
        let mut first_use = match known {
            None => None, // one rank agrees with itself
            Some(Some(verdict)) if matches!(verdict.get(), Some(Ok(()))) => None,
            Some(Some(verdict)) => Some(FirstUse::Await { verdict, key }),
            Some(None) => {
                drop(st);
                let record = self.first_use_record(&key, choice, source)?;
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
        let algorithm = match provider {
            ProviderId::Switch => INA,
            ProviderId::HierarchicalSwitch => HIERARCHICAL_INA,
            ProviderId::Plans => choice.name(),
        };
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
        })
    }

    /// How `provider` runs a call of `shape`: every provider's running half
    /// is registered here, its pricing half in `provider_for`.
    fn runner(&self, provider: ProviderId, shape: &CallShape) -> Result<Box<dyn RunCall>> {
        Ok(match provider {
            ProviderId::Plans => Box::new(plans::RunPlan),
            ProviderId::Switch => Box::new(switch::ViaSwitch::default()),
            ProviderId::HierarchicalSwitch => {
                Box::new(hierarchical_switch::HostsAndSwitch::new(self, shape)?)
            }
        })
    }

    /// This rank's record for the first-use agreement of `key`.
    fn first_use_record(
        &self,
        key: &AgreeKey,
        choice: Choice,
        source: Option<&dyn PlanSource>,
    ) -> Result<[u8; first_use::RECORD]> {
        let (shape, runs, host) = key;
        let definition = match (choice, source) {
            (Choice::Builtin(_), _) => 0,
            (Choice::Registered(alg), Some(source)) => source.digest(alg, shape)?,
            (Choice::Registered(alg), None) => {
                return Err(Error::invalid(format!(
                    "{} algorithm '{}' is registered from Python and runs only in calls made from Python",
                    alg.collective, alg.name
                )))
            }
        };
        let record = first_use::Record {
            shape: first_use::shape_digest(shape),
            runs: *runs,
            host: *host,
            definition,
            name: choice.name(),
        };
        Ok(record.encode())
    }

    /// Who runs a call. The switch runs allreduce only: when asked for
    /// (`algorithm="ina"`, `SHOAL_ALGO=allreduce:ina`), or when it is usable,
    /// can aggregate the dtype and op, and costs less than the cheapest plan
    /// algorithm. Naming a host algorithm (`algorithm=`) keeps the plans.
    fn provider_for(
        &self,
        args: &CollArgs,
        shape: &CallShape,
        source: Option<&dyn PlanSource>,
    ) -> Result<ProviderId> {
        if args.collective != Collective::Allreduce {
            return match args.algorithm.as_deref() {
                Some(a) if ina::is_switch_algorithm(a) => Err(Error::invalid(format!(
                    "algorithm '{a}' is for allreduce only, not {}",
                    args.collective
                ))),
                _ => Ok(ProviderId::Plans),
            };
        }
        let by_name = |name| match name {
            INA => ProviderId::Switch,
            HIERARCHICAL_INA => ProviderId::HierarchicalSwitch,
            _ => ProviderId::Plans,
        };
        match args.algorithm.as_deref() {
            Some(name) => return Ok(by_name(name)),
            None => {
                if let Some(name) = self.engine.selector.switch_forced() {
                    return Ok(by_name(name));
                }
            }
        }
        let plans = PlanExecutor {
            selector: &self.engine.selector,
            source,
        };
        let switch = Switch {
            usable: self.ina().is_ok_and(|i| i.unusable().is_none())
                && ina::wire_types(args.dtype, args.op).is_some(),
            per_link: self.busiest_host,
            plans: &plans,
        };
        let hierarchical = HierarchicalSwitch(&switch);
        // Listed plans first: a tie keeps the host algorithms.
        let cheapest =
            provider::cheapest(&[&plans, &switch, &hierarchical], shape, args.dtype.size())?;
        Ok(cheapest.unwrap_or(ProviderId::Plans))
    }

    fn shape(&self, args: &CollArgs) -> Result<CallShape> {
        let world = self.size();
        if args.collective.rooted() && args.root >= world {
            return Err(Error::invalid(format!(
                "{}: root {} is not a rank of this group of {world}",
                args.collective, args.root
            )));
        }
        let chunk = (self.engine.config.chunk_bytes / args.dtype.size()).max(1);
        let root = if args.collective.rooted() {
            args.root
        } else {
            0
        };
        Ok(CallShape {
            collective: args.collective,
            world,
            // With per-rank counts the single count means nothing.
            count: if args.counts.is_some() { 0 } else { args.count },
            root,
            chunk,
            ranks_per_host: self.ranks_per_host,
            counts: self.check_counts(args)?,
        })
    }

    /// The call's per-rank counts, if it has any, checked against the
    /// collective and the group size.
    fn check_counts(&self, args: &CollArgs) -> Result<Option<Arc<[usize]>>> {
        let Some(counts) = &args.counts else {
            return Ok(None);
        };
        let world = self.size();
        let (expected, what) = match args.collective {
            Collective::Allgather | Collective::ReduceScatter => (world, "one per rank"),
            Collective::Alltoall => (world * world, "world x world, row s for rank s's sends"),
            c => {
                return Err(Error::invalid(format!(
                    "{c} takes no per-rank counts (allgather, reduce_scatter and alltoall do)"
                )))
            }
        };
        if counts.len() != expected {
            return Err(Error::invalid(format!(
                "{}: counts has {} entries, expected {expected} ({what}) in this group of {world}",
                args.collective,
                counts.len()
            )));
        }
        Ok(Some(counts.clone()))
    }

    fn check_buffers(&self, shape: &CallShape, dtype: DType, bufs: &CallBuffers) -> Result<()> {
        let esize = dtype.size();
        for (buf, have, name) in [
            (Buf::Input, bufs.input_bytes, "input"),
            (Buf::Output, bufs.output_bytes, "output"),
        ] {
            let need = shape.buffer_len(self.rank, buf) * esize;
            if have != need {
                return Err(Error::invalid(format!(
                    "{}: {name} buffer has {} elements of {dtype}, expected {} on rank {} ({}, world={})",
                    shape.collective,
                    have / esize,
                    need / esize,
                    self.rank,
                    match &shape.counts {
                        Some(c) => format!("counts={c:?}"),
                        None => format!("count={}", shape.count),
                    },
                    shape.world
                )));
            }
        }
        Ok(())
    }
}

/// The `kind` of a collective's signatures: its index in `Collective::ALL`.
fn kind_of(collective: Collective) -> u8 {
    Collective::ALL
        .iter()
        .position(|&c| c == collective)
        .unwrap() as u8
}

/// The `count` of a call's signature: its count, or with per-rank counts a
/// hash of them (FNV-1a 64 over each as a little-endian u64), so ranks that
/// pass different counts are caught like those that pass different counts.
fn sig_count(shape: &CallShape) -> u64 {
    let Some(counts) = &shape.counts else {
        return shape.count as u64;
    };
    let mut h = Fnv64::new();
    for &c in counts.iter() {
        h.write(&(c as u64).to_le_bytes());
    }
    h.finish()
}

/// The most members any one host has.
fn busiest_host(host_of: &[usize], members: &[usize]) -> usize {
    let mut per_host: HashMap<usize, usize> = HashMap::new();
    for &m in members {
        *per_host
            .entry(host_of.get(m).copied().unwrap_or(m))
            .or_default() += 1;
    }
    per_host.into_values().max().unwrap_or(1)
}

/// Ranks per host when the members (in group order) sit on their hosts in
/// equal contiguous blocks, each host once; 1 otherwise.
fn block_layout(host_of: &[usize], members: &[usize]) -> usize {
    let hosts: Vec<usize> = members
        .iter()
        .map(|&m| host_of.get(m).copied().unwrap_or(m))
        .collect();
    let per_host = hosts.iter().take_while(|&&h| h == hosts[0]).count().max(1);
    let blocks: Vec<&[usize]> = hosts.chunks(per_host).collect();
    let regular = hosts.len().is_multiple_of(per_host)
        && blocks.iter().all(|b| b.iter().all(|&h| h == b[0]))
        && blocks
            .iter()
            .enumerate()
            .all(|(i, b)| blocks[..i].iter().all(|o| o[0] != b[0]));
    if regular {
        per_host
    } else {
        1
    }
}

/// A timeout in nanoseconds, at most a year (as `SHOAL_TIMEOUT`): every
/// deadline (now + timeout) stays representable.
fn duration_ns(t: Duration) -> u64 {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
    t.min(YEAR).as_nanos() as u64
}
