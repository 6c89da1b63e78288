//! Running a collective's message DAG (see [`crate::dag`]) on the flow
//! engine: a message becomes a flow once all its dependencies are
//! delivered; the collective ends when the last message is delivered.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::engine::{Event, FlowEngine};
use super::network::{link_capacities, route, wire_bytes, Route};
use crate::dag::{CollectiveDag, DagError};
use crate::engine::{network_bytes, Engine, Outcome};
use crate::error::SimError;
use crate::topology::{mix, Topology};
use crate::units::{Time, PS_PER_S};

/// The outcome of one simulated collective.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectiveRun {
    /// Time from the first message's start to the last one's delivery.
    pub time_s: f64,
    /// Engine events handled (flow starts, finishes, deliveries).
    pub events: u64,
    /// Component recomputations of the max-min rates.
    pub recomputes: u64,
    /// Bytes carried by each directed link, headers included.
    pub link_bytes: Vec<f64>,
}

/// A DAG's messages in a compact, cache-friendly form for running it:
/// renumbered by *blocks of turns* (every rank's first [`TURN_BLOCK`]
/// messages, rank after rank, then every rank's next [`TURN_BLOCK`], ...),
/// so that messages that become ready together mostly sit together in
/// memory — at 1024 ranks there are millions of messages, and walking them
/// in the generator's per-rank order missed the cache on every delivery
/// (the engine took three times as long). The numbering changes nothing
/// the engine decides: roots start, and a delivery's dependents become
/// ready, in the DAG's own order.
pub struct DagProgress {
    /// `original[i]`: the [`CollectiveDag`] message id of message `i`.
    original: Vec<u32>,
    /// Bytes on the wire, headers included.
    bytes: Vec<u64>,
    /// `pair[i]`: the rank pair (connection) message `i` travels on, an
    /// index into `pair_ranks`, the (sender, receiver) of every pair.
    pair: Vec<u32>,
    pair_ranks: Vec<(u32, u32)>,
    waiting: Vec<u32>,
    /// Dependents of `i` are `dependents[offsets[i]..offsets[i + 1]]`, in
    /// the DAG's order.
    offsets: Vec<u32>,
    dependents: Vec<u32>,
    /// The messages without dependencies, in the DAG's order.
    roots: Vec<u32>,
    delivered: usize,
}

/// Consecutive messages of one rank that keep consecutive numbers in
/// [`DagProgress`]. With one (a pure turn order: every rank's first
/// message, then every rank's second, ...) the renumbering, which reads
/// the DAG rank by rank, wrote a different page for every message: at 1024
/// ranks it took 0.35 s, most of the engine's 0.45 s. Blocks of 8 write a
/// page per 8 messages, and the engine's working set (a block of every
/// rank) still fits in the cache. Measured at 1024 ranks (renumbering +
/// engine CPU s): 1: 0.92, 4: 0.67, 8: 0.63-0.64, 16: 0.66-0.69, 64: 0.72.
pub const TURN_BLOCK: usize = 8;

impl DagProgress {
    /// Errors when the DAG has a dependency cycle.
    ///
    /// The numbering is worked out once as where each block of turns
    /// begins ([`TurnBlocks`], a pass over the senders); the messages and
    /// their dependents are then two independent halves, each writing the
    /// numbering it needs itself: on a large DAG they run on two threads
    /// (the other core is idle while the DAG is prepared and run; written
    /// out by one thread before them, the numbering was a third of this
    /// function at 1024 ranks). Every pass reads the DAG in its own order
    /// (sequentially) and writes a block of a rank at a time (see
    /// [`TURN_BLOCK`]).
    pub fn new(dag: &CollectiveDag) -> Result<Self, DagError> {
        let progress = DagProgress::unchecked(dag);
        progress.check_acyclic()?;
        Ok(progress)
    }

    /// [`DagProgress::new`] without the cycle check, for a run that finds
    /// a cycle itself ([`simulate`]: what never starts is never delivered,
    /// see [`DagProgress::stuck`]).
    fn unchecked(dag: &CollectiveDag) -> Self {
        let turns = TurnBlocks::of(dag);
        // Each half writes its own copy of the new number of every DAG id
        // (~6 ms at 1024 ranks, less than handing one over): the messages
        // on one thread, their dependents and the DAG id of every new
        // number on the other.
        let messages = || NewMessages::of(dag, &turns.renumber());
        let dependents = || {
            let dependents = dependents_of(dag, &turns.renumber());
            (turns.original(), dependents)
        };
        let (messages, (original, (offsets, dependents))) =
            if dag.messages.len() >= PARALLEL_MESSAGES {
                std::thread::scope(|scope| {
                    let messages = scope.spawn(messages);
                    let dependents = dependents();
                    (messages.join().expect("no panic"), dependents)
                })
            } else {
                (messages(), dependents())
            };
        DagProgress {
            original,
            bytes: messages.bytes,
            pair: messages.pair,
            pair_ranks: messages.pairs.ranks,
            waiting: messages.waiting,
            offsets,
            dependents,
            roots: messages.roots,
            delivered: 0,
        }
    }

    /// Kahn's algorithm, for its verdict only: in the turn numbering its
    /// walk is nearly sequential.
    fn check_acyclic(&self) -> Result<(), DagError> {
        let n = self.waiting.len();
        let mut waiting = self.waiting.clone();
        let mut queue: Vec<u32> = self.roots.clone();
        let mut head = 0;
        while head < queue.len() {
            let m = queue[head] as usize;
            head += 1;
            for &d in &self.dependents[self.offsets[m] as usize..self.offsets[m + 1] as usize] {
                waiting[d as usize] -= 1;
                if waiting[d as usize] == 0 {
                    queue.push(d);
                }
            }
        }
        match n - queue.len() {
            0 => Ok(()),
            stuck => Err(DagError::Cycle { stuck, messages: n }),
        }
    }

    /// After a run that has nothing left to do: the messages a cycle kept
    /// from starting, as [`DagProgress::new`] names them. A message starts
    /// once its dependencies are delivered and every message started is
    /// delivered, so the run delivers exactly what Kahn's walk reaches.
    fn stuck(&self) -> Result<(), DagError> {
        match self.len() - self.delivered {
            0 => Ok(()),
            stuck => Err(DagError::Cycle {
                stuck,
                messages: self.len(),
            }),
        }
    }

    /// Messages ready at the start (new numbering), in the DAG's order.
    pub fn roots(&self) -> Vec<usize> {
        self.roots.iter().map(|&m| m as usize).collect()
    }

    /// The DAG's own id of message `i`.
    pub fn original_id(&self, i: usize) -> usize {
        self.original[i] as usize
    }

    /// Marks message `i` delivered; pushes the messages it made ready.
    pub fn deliver(&mut self, i: usize, ready: &mut Vec<usize>) {
        self.delivered += 1;
        let (from, to) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        for &d in &self.dependents[from..to] {
            let d = d as usize;
            self.waiting[d] -= 1;
            if self.waiting[d] == 0 {
                ready.push(d);
            }
        }
    }

    pub fn done(&self) -> bool {
        self.delivered == self.waiting.len()
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Messages from which [`DagProgress::new`] builds on two threads (a
/// thread costs tens of microseconds; a scenario builds a DAG's progress
/// at every iteration of every job).
const PARALLEL_MESSAGES: usize = 1 << 16;

/// What [`DagProgress`] keeps of each message, in the new numbering.
struct NewMessages {
    bytes: Vec<u64>,
    pair: Vec<u32>,
    pairs: RankPairs,
    waiting: Vec<u32>,
    roots: Vec<u32>,
}

impl NewMessages {
    fn of(dag: &CollectiveDag, renumber: &[u32]) -> NewMessages {
        let n = dag.messages.len();
        let mut out = NewMessages {
            bytes: vec![0; n],
            pair: vec![0; n],
            pairs: RankPairs::default(),
            waiting: vec![0; n],
            roots: Vec::new(),
        };
        for (old, m) in dag.messages.iter().enumerate() {
            let new = renumber[old] as usize;
            out.bytes[new] = wire_bytes(m.bytes);
            out.pair[new] = out.pairs.id(m.src_rank as u32, m.dst_rank as u32);
            let deps = dag.deps(old).len();
            out.waiting[new] = deps as u32;
            if deps == 0 {
                out.roots.push(new as u32);
            }
        }
        out
    }
}

/// The dependents of every message in the new numbering (CSR: offsets
/// and ids), each message's in the DAG's order.
fn dependents_of(dag: &CollectiveDag, renumber: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let n = dag.messages.len();
    let mut offsets = vec![0u32; n + 1];
    for &d in &dag.dep_ids {
        offsets[renumber[d as usize] as usize + 1] += 1;
    }
    for i in 0..n {
        offsets[i + 1] += offsets[i];
    }
    let mut fill = offsets.clone();
    let mut dependents = vec![0u32; offsets[n] as usize];
    for old in 0..n {
        for &d in dag.deps(old) {
            let slot = &mut fill[renumber[d as usize] as usize];
            dependents[*slot as usize] = renumber[old];
            *slot += 1;
        }
    }
    (offsets, dependents)
}

/// Numbers the rank pairs of a DAG's messages as they come. A rank's
/// messages mostly go to the peer of its previous one, so the last pair is
/// tried before the map: numbering the pairs once here saves the engine a
/// hash look-up at every start and end of a message.
#[derive(Default)]
struct RankPairs {
    ids: HashMap<(u32, u32), u32, BuildHasherDefault<MixHasher>>,
    /// (sender, receiver) of each pair id.
    ranks: Vec<(u32, u32)>,
    last: Option<((u32, u32), u32)>,
}

impl RankPairs {
    fn id(&mut self, src: u32, dst: u32) -> u32 {
        match self.last {
            Some((ranks, id)) if ranks == (src, dst) => id,
            _ => {
                let next = self.ranks.len() as u32;
                let id = *self.ids.entry((src, dst)).or_insert(next);
                if id == next {
                    self.ranks.push((src, dst));
                }
                self.last = Some(((src, dst), id));
                id
            }
        }
    }
}

/// The numbering of [`DagProgress`]. Block `b` of a rank is its messages
/// `b * TURN_BLOCK ..` in id order; blocks are numbered `b` by `b`, and
/// within one, rank by rank.
struct TurnBlocks<'a> {
    dag: &'a CollectiveDag,
    /// Each rank's messages in id order are `first[r]..first[r + 1]` of
    /// `by_rank`, or of the ids themselves when the DAG numbers its
    /// messages rank after rank, as the DAG builder does (`by_rank` None:
    /// the sort would be the identity, 8 MB of fresh pages at 1024 ranks).
    first: Vec<u32>,
    by_rank: Option<Vec<u32>>,
    /// The new number of every block's first message.
    starts: Vec<u32>,
}

impl<'a> TurnBlocks<'a> {
    fn of(dag: &'a CollectiveDag) -> Self {
        let mut first = vec![0u32; dag.world + 1];
        let mut sorted = true;
        let mut last = 0;
        for m in &dag.messages {
            first[m.src_rank + 1] += 1;
            sorted &= last <= m.src_rank;
            last = m.src_rank;
        }
        for r in 0..dag.world {
            first[r + 1] += first[r];
        }
        let by_rank = (!sorted).then(|| {
            // a counting sort by sender
            let mut fill = first.clone();
            let mut by_rank = vec![0u32; dag.messages.len()];
            for (id, m) in dag.messages.iter().enumerate() {
                by_rank[fill[m.src_rank] as usize] = id as u32;
                fill[m.src_rank] += 1;
            }
            by_rank
        });
        let mut turns = TurnBlocks {
            dag,
            first,
            by_rank,
            starts: Vec::new(),
        };
        // A block begins after the blocks before it of every rank.
        let most = (0..dag.world)
            .map(|r| turns.first[r + 1] - turns.first[r])
            .max();
        let mut starts = vec![0u32; (most.unwrap_or(0) as usize).div_ceil(TURN_BLOCK) + 1];
        for r in 0..dag.world {
            for (b, block) in turns.blocks(r).enumerate() {
                starts[b + 1] += block.len() as u32;
            }
        }
        for b in 1..starts.len() {
            starts[b] += starts[b - 1];
        }
        turns.starts = starts;
        turns
    }

    /// Rank `r`'s blocks, as positions in its messages' order.
    fn blocks(&self, r: usize) -> impl Iterator<Item = std::ops::Range<u32>> {
        let (from, to) = (self.first[r], self.first[r + 1]);
        (from..to)
            .step_by(TURN_BLOCK)
            .map(move |start| start..(start + TURN_BLOCK as u32).min(to))
    }

    /// Calls `place(old, new)` with every message's DAG id and new number,
    /// rank by rank, each rank's in id order.
    fn place(&self, mut place: impl FnMut(u32, u32)) {
        let mut next = self.starts.clone();
        for r in 0..self.dag.world {
            for (b, block) in self.blocks(r).enumerate() {
                for at in block {
                    let old = self.by_rank.as_ref().map_or(at, |ids| ids[at as usize]);
                    place(old, next[b]);
                    next[b] += 1;
                }
            }
        }
    }

    /// The DAG id of every new number.
    fn original(&self) -> Vec<u32> {
        let mut original = vec![0u32; self.dag.messages.len()];
        self.place(|old, new| original[new as usize] = old);
        original
    }

    /// The new number of every DAG id.
    fn renumber(&self) -> Vec<u32> {
        let mut renumber = vec![0u32; self.dag.messages.len()];
        self.place(|old, new| renumber[old as usize] = new);
        renumber
    }
}

/// A hasher for small integer keys: one SplitMix64 round.
#[derive(Default)]
pub struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        mix(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u32(&mut self, x: u32) {
        self.0 = self.0.rotate_left(32) ^ x as u64;
    }
}

/// One collective in flight on an engine: its messages' progress and
/// routes, its flows tagged `tag_base + message` so that several
/// collectives (and other traffic) can share one engine.
pub struct RunningDag {
    pub progress: DagProgress,
    tag_base: u64,
    ready: Vec<usize>,
    /// Messages of a rank pair go one after another, as on shoal's one
    /// connection per peer (and the packet engine's): the pair's message on
    /// the wire, if any, and those ready behind it in order. Without this
    /// the chunks of a pipelined plan all started at once, shared the link
    /// and arrived together, and nothing pipelined; and a collective took
    /// one max-min share per message in flight instead of one per peer.
    /// Indexed by [`DagProgress`]'s pair ids.
    pairs: Vec<Pair>,
}

/// One rank pair's connection: its route, whether a message is on the
/// wire, and the ready ones waiting behind it. Like shoal's transport,
/// which keeps one connection per peer, every message between two ranks
/// takes the same ECMP path (one 5-tuple), computed once per pair.
struct Pair {
    route: Route,
    busy: bool,
    waiting: VecDeque<usize>,
}

impl RunningDag {
    /// `salt` varies the ECMP paths between collectives.
    pub fn new(
        topo: &Topology,
        dag: &CollectiveDag,
        tag_base: u64,
        salt: u64,
    ) -> Result<Self, SimError> {
        check_placement(topo, dag)?;
        let progress = DagProgress::new(dag)?;
        Ok(RunningDag::of(topo, dag, progress, tag_base, salt))
    }

    /// The run of `dag` over `progress`, its numbering: one route per
    /// rank pair.
    fn of(
        topo: &Topology,
        dag: &CollectiveDag,
        progress: DagProgress,
        tag_base: u64,
        salt: u64,
    ) -> Self {
        let pairs = progress
            .pair_ranks
            .iter()
            .map(|&(src, dst)| {
                let key = mix(salt ^ mix(((src as u64) << 32) | dst as u64));
                let (from, to) = (dag.placement[src as usize], dag.placement[dst as usize]);
                Pair {
                    route: route(topo, from, to, key),
                    busy: false,
                    waiting: VecDeque::new(),
                }
            })
            .collect();
        RunningDag {
            progress,
            tag_base,
            ready: Vec::new(),
            pairs,
        }
    }

    /// Starts the messages without dependencies at `now`.
    pub fn start(&mut self, engine: &mut FlowEngine, now: f64) -> Result<(), SimError> {
        for i in self.progress.roots() {
            self.start_message(engine, i, now)?;
        }
        Ok(())
    }

    /// Whether `tag` is one of this collective's flows.
    pub fn owns(&self, tag: u64) -> bool {
        tag >= self.tag_base && tag - self.tag_base < self.progress.len() as u64
    }

    /// Handles the delivery of flow `tag` (one of ours) at `now`: starts
    /// what it unblocked. True when the collective is complete.
    pub fn delivered(
        &mut self,
        engine: &mut FlowEngine,
        tag: u64,
        now: f64,
    ) -> Result<bool, SimError> {
        let mut ready = std::mem::take(&mut self.ready);
        self.progress
            .deliver((tag - self.tag_base) as usize, &mut ready);
        for i in ready.drain(..) {
            self.start_message(engine, i, now)?;
        }
        self.ready = ready;
        Ok(self.progress.done())
    }

    /// Handles the end of flow `tag`'s transmission (one of ours) at `now`:
    /// the next message ready on its rank pair goes on the wire.
    pub fn sent(&mut self, engine: &mut FlowEngine, tag: u64, now: f64) -> Result<(), SimError> {
        let i = (tag - self.tag_base) as usize;
        let p = &self.progress;
        let pair = &mut self.pairs[p.pair[i] as usize];
        match pair.waiting.pop_front() {
            Some(next) => send(engine, &pair.route, p, next, self.tag_base, now),
            None => {
                pair.busy = false;
                Ok(())
            }
        }
    }

    /// Sends message `i` now, or queues it behind its pair's message on
    /// the wire.
    fn start_message(
        &mut self,
        engine: &mut FlowEngine,
        i: usize,
        now: f64,
    ) -> Result<(), SimError> {
        let p = &self.progress;
        let pair = &mut self.pairs[p.pair[i] as usize];
        if pair.busy {
            pair.waiting.push_back(i);
            return Ok(());
        }
        pair.busy = true;
        send(engine, &pair.route, p, i, self.tag_base, now)
    }
}

/// Every rank on a host of `topo`.
fn check_placement(topo: &Topology, dag: &CollectiveDag) -> Result<(), SimError> {
    match dag.placement.iter().find(|&&h| h >= topo.hosts()) {
        Some(&host) => Err(SimError::RankOutside {
            host,
            topology: topo.name.clone(),
            hosts: topo.hosts(),
        }),
        None => Ok(()),
    }
}

/// Puts message `i` of `progress` on the wire along `route` at `now`.
fn send(
    engine: &mut FlowEngine,
    route: &Route,
    progress: &DagProgress,
    i: usize,
    tag_base: u64,
    now: f64,
) -> Result<(), SimError> {
    engine.start_flow(
        now,
        &route.links,
        progress.bytes[i],
        route.latency_s,
        f64::INFINITY,
        tag_base + i as u64,
    )?;
    Ok(())
}

/// Simulates `dag` alone on `topo` and reports its completion time.
///
/// A dependency cycle is found by the run itself rather than by Kahn's
/// walk beforehand: that walk over every message was a serial step before
/// the engine while the other core idled (~20 ms at 1024 ranks).
pub fn simulate(topo: &Topology, dag: &CollectiveDag) -> Result<CollectiveRun, SimError> {
    let mut engine = FlowEngine::new(&link_capacities(topo))?;
    check_placement(topo, dag)?;
    let mut run = RunningDag::of(topo, dag, DagProgress::unchecked(dag), 0, 0);
    run.start(&mut engine, 0.0)?;
    let mut end = 0.0;
    while let Some(event) = engine.next_event() {
        match event {
            Event::Delivered { tag, time_s, .. } => {
                end = time_s;
                run.delivered(&mut engine, tag, time_s)?;
            }
            Event::Sent { tag, time_s } => run.sent(&mut engine, tag, time_s)?,
            Event::Timer { .. } => {}
        }
    }
    run.progress.stuck()?;
    Ok(CollectiveRun {
        time_s: end,
        events: engine.events(),
        recomputes: engine.recomputes(),
        link_bytes: engine.link_bytes(),
    })
}

/// [`simulate`] as the engine dispatch reports it (crate::engine).
pub fn plan_outcome(topo: &Topology, dag: &CollectiveDag) -> Result<Outcome, SimError> {
    let (t0, c0) = (std::time::Instant::now(), crate::engine::thread_cpu_s());
    let run = simulate(topo, dag)?;
    Ok(Outcome {
        engine: Engine::Flow,
        time: (run.time_s * PS_PER_S as f64).round() as Time,
        events: run.events,
        wall_s: t0.elapsed().as_secs_f64(),
        cpu_s: crate::engine::thread_cpu_s() - c0,
        messages: dag.messages.len(),
        bytes: network_bytes(dag),
        packet: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::Message;
    use shoal_plan::Collective;

    /// A DAG of `(src, dst, deps)` messages on two ranks.
    fn dag(messages: &[(usize, usize, &[u32])]) -> CollectiveDag {
        let mut dep_offsets = vec![0];
        let mut dep_ids = Vec::new();
        for (_, _, deps) in messages {
            dep_ids.extend_from_slice(deps);
            dep_offsets.push(dep_ids.len() as u32);
        }
        CollectiveDag {
            collective: Collective::Allreduce,
            algorithm: "hand".into(),
            world: 2,
            bytes_per_rank: 1,
            messages: messages
                .iter()
                .enumerate()
                .map(|(id, &(src_rank, dst_rank, _))| Message {
                    id,
                    src_rank,
                    dst_rank,
                    bytes: 1,
                })
                .collect(),
            dep_offsets,
            dep_ids,
            placement: vec![0, 1],
            reduce_bytes: vec![0, 0],
        }
    }

    #[test]
    fn a_dependency_cycle_is_refused() {
        // 0 and 1 wait for each other; 2 can start.
        let cyclic = dag(&[(0, 1, &[1]), (1, 0, &[0]), (0, 1, &[])]);
        let err = DagProgress::new(&cyclic).err().expect("a cycle");
        assert_eq!(
            err,
            DagError::Cycle {
                stuck: 2,
                messages: 3
            }
        );
        assert!(
            err.to_string().ends_with("2 of 3 messages can never start"),
            "{err}"
        );
    }

    #[test]
    fn a_run_finds_the_cycle_that_the_check_names() {
        // 1 and 2 wait for each other; 3 waits for 1; 0 and 4 can run.
        let cyclic = dag(&[
            (0, 1, &[]),
            (1, 0, &[2]),
            (0, 1, &[1]),
            (1, 0, &[1]),
            (0, 1, &[0]),
        ]);
        let checked = DagProgress::new(&cyclic).err().expect("a cycle");
        assert_eq!(
            checked,
            DagError::Cycle {
                stuck: 3,
                messages: 5
            }
        );
        let topo = Topology::parse("star:hosts=2", Default::default()).unwrap();
        let ran = simulate(&topo, &cyclic).expect_err("a cycle");
        assert!(matches!(ran, SimError::Dag(e) if e == checked));
    }

    #[test]
    fn messages_are_numbered_by_blocks_of_turns_and_roots_keep_the_dag_order() {
        // Rank 0 sends 10 messages, rank 1 three, their ids interleaved;
        // message 3 waits for 0, message 12 for 5.
        let src = [0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        let messages: Vec<(usize, usize, &[u32])> = src
            .iter()
            .enumerate()
            .map(|(id, &s)| {
                let deps: &[u32] = match id {
                    3 => &[0],
                    12 => &[5],
                    _ => &[],
                };
                (s, 1 - s, deps)
            })
            .collect();
        let d = dag(&messages);
        let mut p = DagProgress::new(&d).unwrap();
        let order: Vec<usize> = (0..src.len()).map(|i| p.original_id(i)).collect();
        assert_eq!(TURN_BLOCK, 8);
        assert_eq!(
            order,
            [0, 2, 4, 6, 7, 8, 9, 10, 1, 3, 5, 11, 12],
            "every rank's first 8 messages, rank after rank, then the next 8"
        );
        let roots: Vec<usize> = p.roots().into_iter().map(|i| p.original_id(i)).collect();
        let expected: Vec<usize> = (0..src.len()).filter(|&m| m != 3 && m != 12).collect();
        assert_eq!(roots, expected);
        let new_id = |old| order.iter().position(|&m| m == old).unwrap();
        let mut ready = Vec::new();
        p.deliver(new_id(0), &mut ready);
        p.deliver(new_id(5), &mut ready);
        let ready: Vec<usize> = ready.into_iter().map(|i| p.original_id(i)).collect();
        assert_eq!(ready, [3, 12]);
    }
}
