//! A collective as a dependency graph of messages, generated from shoal's
//! real plans (the generators in `shoal-plan`, looked up by collective and
//! algorithm name). This is the interface both engines consume.
//!
//! Semantics: message `m` leaves rank `m.src_rank` for `m.dst_rank` once
//! every message in `dag.deps(m)` has been *delivered* (all its bytes received;
//! deps are always messages received by `m.src_rank`). The collective is
//! done when every message is delivered.
//!
//! How plans become messages: every `Send` step is one message, matched to
//! the `Recv`/`RecvReduce` on the peer with the same tag. A step's message
//! dependencies are found by walking its local dependencies: a receive
//! contributes its own message (plus those of the local writes it builds on,
//! which a `RecvReduce` reads), copies and reductions pass their
//! dependencies' messages on, and dependencies on *sends* are dropped: a
//! send's buffer is free once it is handed to the transport (buffered
//! sends), as shoal's executor does. Local copies and reductions cost no
//! time in this model (the network dominates at the sizes simulated);
//! `reduce_bytes` records the bytes each rank reduces, for engines or
//! reports that want to charge them.
//!
//! Shared-memory plans (`shm_*` algorithms, all ranks on one host) become
//! messages too, in [`shared`]: a `PeerRead`/`PeerReadReduce` is a message
//! from the exposing peer to the reader that starts once the peer's
//! `Expose` and the reader's own dependencies are satisfied, and a
//! `Release` waits for the reads of its flag. These are the only deps not
//! received by `src_rank`.

mod error;
mod shared;

pub use error::DagError;

use shoal_plan::{algorithms, CallPlans, CallShape, Collective, Op, Plan};

/// One point-to-point transfer of a collective. Its dependencies are
/// [`CollectiveDag::deps`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Index in [`CollectiveDag::messages`].
    pub id: usize,
    pub src_rank: usize,
    pub dst_rank: usize,
    pub bytes: u64,
}

/// All messages of one collective call and where its ranks run.
#[derive(Clone, Debug)]
pub struct CollectiveDag {
    pub collective: Collective,
    pub algorithm: String,
    pub world: usize,
    /// Bytes each rank contributes (count x element size).
    pub bytes_per_rank: u64,
    pub messages: Vec<Message>,
    /// The dependencies of every message in one array (CSR): those of
    /// message `m` are `dep_ids[dep_offsets[m]..dep_offsets[m + 1]]`,
    /// sorted. At 1024 ranks there are millions of messages, and a `Vec`
    /// each was most of the cost of building the DAG.
    pub dep_offsets: Vec<u32>,
    pub dep_ids: Vec<u32>,
    /// `placement[rank]`: the host the rank runs on.
    pub placement: Vec<usize>,
    /// Bytes reduced locally by each rank (not charged by the engines).
    pub reduce_bytes: Vec<u64>,
}

/// What to generate: a call of a collective with a named algorithm.
#[derive(Clone, Debug)]
pub struct DagSpec {
    pub collective: Collective,
    pub algorithm: String,
    pub world: usize,
    /// Bytes per rank (the `count` of the call times `elem_size`).
    pub bytes: u64,
    pub elem_size: usize,
    /// Pipelining piece in bytes (shoal's `SHOAL_CHUNK_BYTES`, default 1 MiB).
    pub chunk_bytes: u64,
    pub ranks_per_host: usize,
    pub root: usize,
}

impl DagSpec {
    /// A call of `bytes` per rank, fp32, 1 MiB pieces, one rank per host.
    pub fn new(collective: Collective, algorithm: &str, world: usize, bytes: u64) -> DagSpec {
        DagSpec {
            collective,
            algorithm: algorithm.to_string(),
            world,
            bytes,
            elem_size: 4,
            chunk_bytes: 1 << 20,
            ranks_per_host: 1,
            root: 0,
        }
    }

    pub fn shape(&self) -> CallShape {
        let elem = self.elem_size.max(1) as u64;
        CallShape {
            collective: self.collective,
            world: self.world,
            count: self.bytes.div_ceil(elem) as usize,
            root: self.root,
            chunk: (self.chunk_bytes / elem).max(1) as usize,
            ranks_per_host: self.ranks_per_host.max(1),
            counts: None,
        }
    }

    /// Ranks in contiguous blocks of `ranks_per_host` on hosts `0, 1, ...`.
    pub fn block_placement(&self) -> Vec<usize> {
        (0..self.world)
            .map(|r| r / self.ranks_per_host.max(1))
            .collect()
    }
}

/// Plans of algorithms the built-in registry does not have: those
/// registered from Python (shoal-py asks the registered function for one
/// rank at a time and lowers its operations in Rust) or a plan document
/// ([`Document`]). The simulated DAG is built from the same per-rank plans
/// the executor would run.
pub trait PlanSource {
    /// Whether this source makes plans for algorithm `name` of `collective`.
    fn has(&self, collective: Collective, name: &str) -> bool;
    /// The plan of `rank` for a call of `shape`; asked once per rank, in
    /// rank order.
    fn plan(&self, name: &str, shape: &CallShape, rank: usize) -> Result<Plan, DagError>;
    /// Whether the plans are a function of (algorithm, shape) alone, so
    /// the DAG built from them may serve the next call of the same shape
    /// ([`build_with`] keeps the last one): a Python algorithm's function
    /// runs once per rank, ~25 ms a rank at 1024 ranks of a ring.
    fn reusable(&self) -> bool {
        false
    }
}

/// No plans beyond the built-in ones.
pub struct BuiltinOnly;

impl PlanSource for BuiltinOnly {
    fn has(&self, _: Collective, _: &str) -> bool {
        false
    }
    fn plan(&self, name: &str, _: &CallShape, _: usize) -> Result<Plan, DagError> {
        Err(DagError::NoPlans(name.to_string()))
    }
}

/// A plan document (`shoal-plan/1`, `shoal.algo.plan_json`): the plans of
/// every rank of one call shape, served under the algorithm's name.
pub struct Document {
    pub plans: CallPlans,
    /// The name it answers to: the document's algorithm without its
    /// collective (`"allreduce/ring"` -> `"ring"`), else `"plan"`.
    pub name: String,
}

impl Document {
    pub fn new(plans: CallPlans) -> Document {
        let name = plans
            .algorithm
            .as_deref()
            .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
            .unwrap_or_else(|| "plan".into());
        Document { plans, name }
    }

    /// The call the document was made for, as a [`DagSpec`] (fp32
    /// elements, the document's pieces, root and ranks per host).
    pub fn spec(&self) -> Result<DagSpec, DagError> {
        let s = &self.plans.shape;
        if s.counts.is_some() {
            return Err(DagError::DocumentCounts);
        }
        let mut spec = DagSpec::new(s.collective, &self.name, s.world, s.count as u64 * 4);
        spec.chunk_bytes = s.chunk as u64 * 4;
        spec.ranks_per_host = s.ranks_per_host;
        spec.root = s.root;
        Ok(spec)
    }
}

impl PlanSource for Document {
    fn has(&self, collective: Collective, name: &str) -> bool {
        collective == self.plans.shape.collective && name == self.name
    }
    fn plan(&self, _: &str, shape: &CallShape, rank: usize) -> Result<Plan, DagError> {
        if *shape != self.plans.shape {
            return Err(DagError::DocumentShape {
                document: Box::new(self.plans.shape.clone()),
                asked: Box::new(shape.clone()),
            });
        }
        self.plans
            .plans
            .get(rank)
            .cloned()
            .ok_or(DagError::DocumentRank(rank))
    }
}

/// Generates the DAG of `spec` with ranks placed by `placement`
/// (`None`: [`DagSpec::block_placement`]) from a built-in algorithm.
pub fn build(spec: &DagSpec, placement: Option<Vec<usize>>) -> Result<CollectiveDag, DagError> {
    build_with(spec, placement, &BuiltinOnly)
}

/// As [`build`], with `source` supplying the algorithms the built-in
/// registry does not have.
pub fn build_with(
    spec: &DagSpec,
    placement: Option<Vec<usize>>,
    source: &dyn PlanSource,
) -> Result<CollectiveDag, DagError> {
    if spec.world == 0 {
        return Err(DagError::NoRanks);
    }
    if spec.root >= spec.world {
        return Err(DagError::RootOutside {
            root: spec.root,
            world: spec.world,
        });
    }
    let placement = placement.unwrap_or_else(|| spec.block_placement());
    if placement.len() != spec.world {
        return Err(DagError::Placement {
            entries: placement.len(),
            world: spec.world,
        });
    }
    let shape = spec.shape();
    if source.has(spec.collective, &spec.algorithm) && source.reusable() {
        let key = (
            spec.algorithm.clone(),
            shape.clone(),
            spec.elem_size,
            placement.clone(),
        );
        let mut last = LAST_BUILT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, dag)) = last.as_ref() {
            if *k == key {
                return Ok(dag.clone());
            }
        }
        *last = None; // free the old one before building the next
        let plan = |rank| source.plan(&spec.algorithm, &shape, rank);
        let dag = assemble(
            spec,
            spec.algorithm.clone(),
            messages_from(spec, plan)?,
            placement,
        );
        *last = Some((key, dag.clone()));
        return Ok(dag);
    }
    let (name, parts) = if source.has(spec.collective, &spec.algorithm) {
        let plan = |rank| source.plan(&spec.algorithm, &shape, rank);
        (spec.algorithm.clone(), messages_from(spec, plan)?)
    } else {
        let algo = algorithms::find(spec.collective, &spec.algorithm)?;
        if let Some(why) = algo.refuses(&shape) {
            return Err(DagError::Refused {
                algorithm: algo.name.to_string(),
                why: why.to_string(),
            });
        }
        let parts = if algo.reads_peers() {
            let plans: Vec<Plan> = (0..spec.world)
                .map(|r| (algo.generate)(&shape, r))
                .collect();
            shared::build(&plans, spec.elem_size as u64)?
        } else {
            messages_of(spec, &shape, algo.generate)?
        };
        (algo.name.to_string(), parts)
    };
    Ok(assemble(spec, name, parts, placement))
}

/// The DAG last built from a reusable [`PlanSource`], under (algorithm,
/// shape, element size, placement).
type LastBuilt = Option<((String, CallShape, usize, Vec<usize>), CollectiveDag)>;
static LAST_BUILT: std::sync::Mutex<LastBuilt> = std::sync::Mutex::new(None);

fn assemble(
    spec: &DagSpec,
    algorithm: String,
    parts: Parts,
    placement: Vec<usize>,
) -> CollectiveDag {
    let (messages, dep_offsets, dep_ids, reduce_bytes) = parts;
    CollectiveDag {
        collective: spec.collective,
        algorithm,
        world: spec.world,
        bytes_per_rank: spec.bytes,
        messages,
        dep_offsets,
        dep_ids,
        placement,
        reduce_bytes,
    }
}

/// Messages, dependencies (CSR offsets and ids) and bytes reduced per rank.
type Parts = (Vec<Message>, Vec<u32>, Vec<u32>, Vec<u64>);

/// The messages of a plan of sends and receives (every algorithm but the
/// shared-memory ones).
fn messages_of(
    spec: &DagSpec,
    shape: &CallShape,
    generate: fn(&CallShape, usize) -> Plan,
) -> Result<Parts, DagError> {
    let elem = spec.elem_size as u64;
    let mut builder = Builder::new(spec.world);
    for_each_rank(
        spec.world,
        |rank| RankMessages::of(&generate(shape, rank), elem),
        |rank| builder.add(rank?),
    )?;
    builder.finish()
}

/// The messages of plans from a [`PlanSource`], asked for in rank order on
/// this thread (a Python algorithm runs under the interpreter's lock).
/// Plans of messages stream through the builder; shared-memory plans (a
/// plan document may hold them) are collected for [`shared::build`].
fn messages_from(
    spec: &DagSpec,
    mut plan: impl FnMut(usize) -> Result<Plan, DagError>,
) -> Result<Parts, DagError> {
    let elem = spec.elem_size as u64;
    let first = plan(0)?;
    if reads_peers(&first) {
        let mut plans = vec![first];
        for rank in 1..spec.world {
            plans.push(plan(rank)?);
        }
        return shared::build(&plans, elem);
    }
    let mut builder = Builder::new(spec.world);
    builder.add(RankMessages::of(&first, elem)?)?;
    for rank in 1..spec.world {
        builder.add(RankMessages::of(&plan(rank)?, elem)?)?;
    }
    builder.finish()
}

/// Whether a plan has shared-memory steps (reads of peers' buffers).
fn reads_peers(plan: &Plan) -> bool {
    plan.steps.iter().any(|s| {
        matches!(
            s.op,
            Op::Expose { .. }
                | Op::PeerRead { .. }
                | Op::PeerReadReduce { .. }
                | Op::Release { .. }
        )
    })
}

/// Calls `consume` on `make(rank)` for every rank, in rank order.
/// Generating the plans is most of the cost of a large DAG, and each
/// rank's is independent: with more than one core, worker threads make
/// them (rank `r` on worker `r mod T`) while this thread consumes them in
/// order. What a worker makes travels through a bounded channel, so only a
/// few are alive at a time (holding all 1024 ranks' plans took more memory
/// than the DAG).
fn for_each_rank<T, M, C>(world: usize, make: M, mut consume: C) -> Result<(), DagError>
where
    T: Send,
    M: Fn(usize) -> T + Sync,
    C: FnMut(T) -> Result<(), DagError>,
{
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = cores.min(4).min(world / 64);
    if workers < 2 {
        return (0..world).try_for_each(|rank| consume(make(rank)));
    }
    std::thread::scope(|scope| {
        let make = &make;
        let receivers: Vec<_> = (0..workers)
            .map(|w| {
                let (tx, rx) = std::sync::mpsc::sync_channel(16);
                scope.spawn(move || {
                    for rank in (w..world).step_by(workers) {
                        if tx.send(make(rank)).is_err() {
                            return; // the consumer stopped on an error
                        }
                    }
                });
                rx
            })
            .collect();
        for rank in 0..world {
            let made = receivers[rank % workers]
                .recv()
                .map_err(|_| DagError::GeneratorFailed(rank))?;
            consume(made)?;
        }
        Ok(())
    })
}

/// [`Builder::message_of`] of a receive whose sender is still to come.
const UNMATCHED: u32 = u32::MAX;

/// A receive step, before it is matched to its send.
#[derive(Clone, Copy)]
struct Receive {
    peer: u32,
    rank: u32,
    tag: u32,
    bytes: u64,
}

/// One rank's plan reduced to what the DAG needs: its sends, each with
/// the receives it waits for (numbered within the rank), its receives, and
/// the bytes it reduces. Made on the worker that generated the plan, which
/// also frees the plan's memory where it was allocated.
struct RankMessages {
    rank: usize,
    /// (receiver, tag, bytes) of each send, in step order.
    sends: Vec<(u32, u32, u64)>,
    /// Dependencies of each send as the rank's receive numbers (CSR).
    dep_offsets: Vec<u32>,
    dep_receives: Vec<u32>,
    receives: Vec<Receive>,
    reduce_bytes: u64,
}

impl RankMessages {
    /// Walks the plan's steps in order: a step's frontier is the union of
    /// its non-send dependencies' frontiers, plus its own receive; a send
    /// takes its frontier as the message's dependencies.
    fn of(plan: &Plan, elem: u64) -> Result<RankMessages, DagError> {
        let rank = plan.rank;
        let mut out = RankMessages {
            rank,
            sends: Vec::new(),
            dep_offsets: vec![0],
            dep_receives: Vec::new(),
            receives: Vec::new(),
            reduce_bytes: 0,
        };
        // Per step, the receives it builds on (CSR).
        let mut front_offsets: Vec<u32> = Vec::with_capacity(plan.steps.len() + 1);
        let mut front: Vec<u32> = Vec::new();
        let mut f: Vec<u32> = Vec::new();
        front_offsets.push(0);
        for step in &plan.steps {
            f.clear();
            for &d in &step.deps {
                let (from, to) = (front_offsets[d], front_offsets[d + 1]);
                f.extend_from_slice(&front[from as usize..to as usize]);
            }
            match &step.op {
                Op::Recv { peer, tag, dst } | Op::RecvReduce { peer, tag, dst } => {
                    let bytes = dst.len as u64 * elem;
                    f.push(out.receives.len() as u32);
                    out.receives.push(Receive {
                        peer: *peer as u32,
                        rank: rank as u32,
                        tag: *tag,
                        bytes,
                    });
                    if matches!(step.op, Op::RecvReduce { .. }) {
                        out.reduce_bytes += bytes;
                    }
                }
                Op::Reduce { dst, .. } => out.reduce_bytes += dst.len as u64 * elem,
                Op::Send { peer, tag, src } => {
                    out.sends.push((*peer as u32, *tag, src.len as u64 * elem));
                    f.sort_unstable();
                    f.dedup();
                    out.dep_receives.extend_from_slice(&f);
                    out.dep_offsets.push(out.dep_receives.len() as u32);
                    f.clear(); // a send's buffer is free at once: no frontier
                }
                Op::Copy { .. } => {}
                Op::Expose { .. }
                | Op::PeerRead { .. }
                | Op::PeerReadReduce { .. }
                | Op::Release { .. } => {
                    // algorithms that read peers go through `shared::build`
                    return Err(DagError::SharedStep { rank });
                }
            }
            f.sort_unstable();
            f.dedup();
            front.extend_from_slice(&f);
            front_offsets.push(front.len() as u32);
        }
        Ok(out)
    }
}

/// Turns ranks' messages, fed in rank order, into the DAG. Receives are
/// numbered as they come (a *receive handle*) and dependencies are
/// collected as handles; every receive is matched to its send by (sender,
/// receiver, tag), and [`Builder::finish`] rewrites the handles as message
/// ids. No hashing: each sender's messages are sorted by (receiver, tag)
/// once and found by binary search, and a receiver mostly asks the same
/// few senders. A receive from a rank already added is matched as it
/// comes, while the workers make the next plans (most of a collective's:
/// a ring's come from the rank before); the rest, in `finish`, after the
/// last plan, when nothing else runs beside it.
struct Builder {
    world: usize,
    messages: Vec<Message>,
    /// (receiver, tag, id) of every message, in id order, so the messages
    /// of sender `r` are `send_keys[first_send[r]..first_send[r + 1]]`.
    send_keys: Vec<(u32, u32, u32)>,
    first_send: Vec<u32>,
    receives: Vec<Receive>,
    /// `message_of[handle]`: the message receive `handle` takes, or
    /// [`UNMATCHED`] while its sender is still to come.
    message_of: Vec<u32>,
    /// Where each sender's previous match left off ([`Builder::find_send`]).
    next_key: Vec<u32>,
    /// Dependencies of each message as receive handles (CSR).
    dep_offsets: Vec<u32>,
    dep_handles: Vec<u32>,
    reduce_bytes: Vec<u64>,
}

impl Builder {
    fn new(world: usize) -> Self {
        Builder {
            world,
            messages: Vec::new(),
            send_keys: Vec::new(),
            first_send: vec![0],
            receives: Vec::new(),
            message_of: Vec::new(),
            next_key: vec![0; world],
            dep_offsets: vec![0],
            dep_handles: Vec::new(),
            reduce_bytes: vec![0; world],
        }
    }

    /// Appends the next rank's messages (ranks come in order) and matches
    /// the receives whose senders have come.
    fn add(&mut self, rank: RankMessages) -> Result<(), DagError> {
        let r = rank.rank;
        if r == 0 {
            self.reserve_like(&rank);
        }
        let first_receive = self.receives.len() as u32;
        let first_send = self.messages.len();
        for (i, &(peer, tag, bytes)) in rank.sends.iter().enumerate() {
            let id = self.messages.len();
            self.messages.push(Message {
                id,
                src_rank: r,
                dst_rank: peer as usize,
                bytes,
            });
            self.send_keys.push((peer, tag, id as u32));
            let deps =
                &rank.dep_receives[rank.dep_offsets[i] as usize..rank.dep_offsets[i + 1] as usize];
            self.dep_handles
                .extend(deps.iter().map(|&d| first_receive + d));
            self.dep_offsets.push(self.dep_handles.len() as u32);
        }
        self.reduce_bytes[r] += rank.reduce_bytes;
        self.first_send.push(self.messages.len() as u32);
        self.next_key[r] = first_send as u32;
        let keys = &mut self.send_keys[first_send..];
        keys.sort_unstable();
        if let Some(w) = keys
            .windows(2)
            .find(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1)
        {
            return Err(DagError::SentTwice {
                rank: r,
                peer: w[0].0 as usize,
                tag: w[0].1,
            });
        }
        for rcv in &rank.receives {
            let id = if (rcv.peer as usize) <= r {
                self.match_receive(rcv)?
            } else {
                UNMATCHED
            };
            self.message_of.push(id);
        }
        self.receives.extend(rank.receives);
        Ok(())
    }

    /// The message `rcv` takes, its sender added.
    fn match_receive(&mut self, rcv: &Receive) -> Result<u32, DagError> {
        let id = self.find_send(rcv).ok_or(DagError::NeverSent {
            rank: rcv.rank as usize,
            peer: rcv.peer as usize,
            tag: rcv.tag,
        })?;
        if self.messages[id as usize].bytes != rcv.bytes {
            return Err(DagError::LengthsDiffer {
                message: id as usize,
            });
        }
        Ok(id)
    }

    /// Reserves room for `world` ranks like `first`. Most algorithms give
    /// every rank about as many messages; growing the arrays by doubling
    /// instead copied them and touched twice their final memory in fresh
    /// pages (at 1024 ranks of a ring, ~150 MB on the thread that the plan
    /// workers wait for). An estimate too small still grows; one too large
    /// leaves untouched pages, which cost nothing.
    fn reserve_like(&mut self, first: &RankMessages) {
        let world = self.world;
        self.messages.reserve(first.sends.len() * world);
        self.send_keys.reserve(first.sends.len() * world);
        self.dep_offsets.reserve(first.sends.len() * world);
        self.dep_handles.reserve(first.dep_receives.len() * world);
        self.receives.reserve(first.receives.len() * world);
        self.message_of.reserve(first.receives.len() * world);
    }

    /// Matches the receives left and rewrites dependencies as message ids.
    fn finish(mut self) -> Result<Parts, DagError> {
        let mut message_of = std::mem::take(&mut self.message_of);
        for (handle, id) in message_of.iter_mut().enumerate() {
            if *id == UNMATCHED {
                let rcv = self.receives[handle];
                *id = self.match_receive(&rcv)?;
            }
        }
        if message_of.len() != self.messages.len() {
            return Err(DagError::NeverReceived {
                unreceived: self.messages.len().abs_diff(message_of.len()),
                messages: self.messages.len(),
            });
        }
        // Handles -> ids, sorted and without repeats, compacted in place.
        let mut write = 0;
        for m in 0..self.messages.len() {
            let (from, to) = (
                self.dep_offsets[m] as usize,
                self.dep_offsets[m + 1] as usize,
            );
            self.dep_offsets[m] = write as u32;
            for i in from..to {
                self.dep_handles[write + i - from] = message_of[self.dep_handles[i] as usize];
            }
            let deps = &mut self.dep_handles[write..write + to - from];
            deps.sort_unstable();
            let mut kept = 0;
            for i in 0..deps.len() {
                if i == 0 || deps[i] != deps[kept - 1] {
                    deps[kept] = deps[i];
                    kept += 1;
                }
            }
            write += kept;
        }
        let n = self.messages.len();
        self.dep_offsets[n] = write as u32;
        self.dep_handles.truncate(write);
        Ok((
            self.messages,
            self.dep_offsets,
            self.dep_handles,
            self.reduce_bytes,
        ))
    }

    /// The message a receive takes: sent by its peer to its rank with its tag.
    /// `self.next_key[peer]` is where the peer's previous match left off: a
    /// rank's receives from a peer mostly come in the order of the peer's
    /// sorted sends, so the key there is tried before a binary search (the
    /// search's mispredicted comparisons were half of matching 2 M
    /// receives).
    fn find_send(&mut self, rcv: &Receive) -> Option<u32> {
        let peer = rcv.peer as usize;
        if peer >= self.world {
            return None;
        }
        let (from, to) = (
            self.first_send[peer] as usize,
            self.first_send[peer + 1] as usize,
        );
        let wanted = (rcv.rank, rcv.tag);
        let guess = self.next_key[peer] as usize;
        let at = match self.send_keys.get(guess) {
            Some(&(dst, tag, _)) if guess < to && (dst, tag) == wanted => guess,
            _ => {
                let keys = &self.send_keys[from..to];
                from + keys
                    .binary_search_by_key(&wanted, |&(dst, tag, _)| (dst, tag))
                    .ok()?
            }
        };
        self.next_key[peer] = at as u32 + 1;
        Some(self.send_keys[at].2)
    }
}

impl CollectiveDag {
    /// Total bytes carried by all messages.
    pub fn total_bytes(&self) -> u64 {
        self.messages.iter().map(|m| m.bytes).sum()
    }

    /// The messages that must be delivered before message `m` starts.
    pub fn deps(&self, m: usize) -> &[u32] {
        &self.dep_ids[self.dep_offsets[m] as usize..self.dep_offsets[m + 1] as usize]
    }

    /// Messages with no dependencies: they start at time 0.
    pub fn roots(&self) -> impl Iterator<Item = &Message> {
        self.messages.iter().filter(|m| self.deps(m.id).is_empty())
    }

    /// `dependents[m]`: the messages that list `m` in their deps.
    pub fn dependents(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.messages.len()];
        for m in &self.messages {
            for &d in self.deps(m.id) {
                out[d as usize].push(m.id);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_allreduce_is_a_chain_of_2p_minus_2_rounds() {
        let mut spec = DagSpec::new(Collective::Allreduce, "ring", 4, 4096);
        spec.chunk_bytes = 1 << 30; // one piece per block
        let dag = build(&spec, None).unwrap();
        assert_eq!(dag.messages.len(), 4 * 2 * 3);
        assert!(dag.messages.iter().all(|m| m.bytes == 1024));
        assert!(dag
            .messages
            .iter()
            .all(|m| m.dst_rank == (m.src_rank + 1) % 4));
        assert_eq!(dag.roots().count(), 4, "one first send per rank");
        // Every dep is a message received by the sender.
        for m in &dag.messages {
            for &d in dag.deps(m.id) {
                assert_eq!(dag.messages[d as usize].dst_rank, m.src_rank);
            }
        }
        // Longest dependency chain: 2(p-1) messages.
        let mut depth = vec![0; dag.messages.len()];
        for _ in 0..dag.messages.len() {
            for m in &dag.messages {
                depth[m.id] = 1 + dag
                    .deps(m.id)
                    .iter()
                    .map(|&d| depth[d as usize])
                    .max()
                    .unwrap_or(0);
            }
        }
        assert_eq!(depth.iter().max(), Some(&6));
        assert_eq!(dag.reduce_bytes, vec![3 * 1024; 4]);
    }

    #[test]
    fn every_registered_algorithm_builds() {
        for algo in algorithms::registry() {
            let mut spec = DagSpec::new(algo.collective, algo.name, 8, 8192);
            // shared-memory algorithms serve one host only
            spec.ranks_per_host = if algo.reads_peers() { 8 } else { 2 };
            let dag = build(&spec, None).unwrap();
            if algo.collective != Collective::Barrier {
                assert!(dag.total_bytes() > 0, "{}", algo.name);
            }
        }
    }

    #[test]
    fn receives_find_their_sends_in_any_order_and_a_missing_one_is_named() {
        // Rank 1 receives from rank 0 out of the order rank 0 sends in.
        let spec = DagSpec::new(Collective::Allreduce, "hand", 2, 8);
        let plans = |received: &'static [u32]| {
            move |rank| {
                let mut p = Plan::new(rank);
                let r = shoal_plan::Region::output(0, 1);
                for &tag in if rank == 0 { &[0, 1, 2][..] } else { received } {
                    if rank == 0 {
                        p.send(1, tag, r, vec![]);
                    } else {
                        p.recv(0, tag, r, vec![]);
                    }
                }
                Ok(p)
            }
        };
        let (messages, ..) = messages_from(&spec, plans(&[2, 0, 1])).unwrap();
        assert_eq!(messages.len(), 3);
        let err = messages_from(&spec, plans(&[0, 3, 1])).unwrap_err();
        assert_eq!(
            err,
            DagError::NeverSent {
                rank: 1,
                peer: 0,
                tag: 3
            }
        );
    }

    #[test]
    fn bad_specs_are_named() {
        let spec = DagSpec::new(Collective::Allreduce, "nope", 4, 64);
        let err = build(&spec, None).unwrap_err();
        assert!(matches!(err, DagError::UnknownAlgorithm(_)));
        assert!(err
            .to_string()
            .starts_with("unknown allreduce algorithm 'nope'"));
        let spec = DagSpec::new(Collective::Allreduce, "ring", 4, 64);
        let err = build(&spec, Some(vec![0, 1])).unwrap_err();
        assert_eq!(
            err,
            DagError::Placement {
                entries: 2,
                world: 4
            }
        );
        assert_eq!(err.to_string(), "placement has 2 entries for 4 ranks");
        let spec = DagSpec::new(Collective::Allreduce, "ring", 0, 64);
        assert_eq!(build(&spec, None).err(), Some(DagError::NoRanks));
    }
}
