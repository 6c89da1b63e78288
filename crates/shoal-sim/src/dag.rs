//! A collective as a dependency graph of messages, generated from shoal's
//! real plans (the generators in `shoal-plan`, looked up by collective and
//! algorithm name). This is the interface both engines consume.
//!
//! Semantics: message `m` leaves rank `m.src_rank` for `m.dst_rank` once
//! every message in `m.deps` has been *delivered* (all its bytes received;
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
//! Shared-memory steps (`shm_*` algorithms, all ranks on one host) become
//! messages too: a `PeerRead`/`PeerReadReduce` is a message from the
//! exposing peer to the reader that starts once the peer's `Expose` and the
//! reader's own dependencies are satisfied, and a `Release` waits for the
//! reads of its flag. These are the only deps not received by `src_rank`.

use std::collections::HashMap;

use shoal_plan::{algorithms, CallShape, Collective, Op};

/// One point-to-point transfer of a collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Index in [`CollectiveDag::messages`].
    pub id: usize,
    pub src_rank: usize,
    pub dst_rank: usize,
    pub bytes: u64,
    /// Messages that must be delivered (at `src_rank`) before this one starts.
    pub deps: Vec<usize>,
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

/// Generates the DAG of `spec` with ranks placed by `placement`
/// (`None`: [`DagSpec::block_placement`]).
pub fn build(spec: &DagSpec, placement: Option<Vec<usize>>) -> Result<CollectiveDag, String> {
    if spec.world == 0 {
        return Err("a collective needs at least one rank".into());
    }
    if spec.root >= spec.world {
        return Err(format!(
            "root {} is not a rank of {}",
            spec.root, spec.world
        ));
    }
    let placement = placement.unwrap_or_else(|| spec.block_placement());
    if placement.len() != spec.world {
        return Err(format!(
            "placement has {} entries for {} ranks",
            placement.len(),
            spec.world
        ));
    }
    let algo = algorithms::find(spec.collective, &spec.algorithm)?;
    let shape = spec.shape();
    if let Some(why) = algo.refuses(&shape) {
        return Err(format!("{} cannot serve this call: {why}", algo.name));
    }
    let elem = spec.elem_size as u64;
    let plans: Vec<_> = (0..spec.world)
        .map(|r| (algo.generate)(&shape, r))
        .collect();

    // Pass 1: one message per Send, keyed by (src, dst, tag) for matching.
    let mut messages = Vec::new();
    let mut by_key = HashMap::new();
    for plan in &plans {
        for step in &plan.steps {
            if let Op::Send { peer, tag, src } = &step.op {
                let id = messages.len();
                if by_key.insert((plan.rank, *peer, *tag), id).is_some() {
                    return Err(format!(
                        "plan of rank {} sends tag {tag} to {peer} twice",
                        plan.rank
                    ));
                }
                messages.push(Message {
                    id,
                    src_rank: plan.rank,
                    dst_rank: *peer,
                    bytes: src.len as u64 * elem,
                    deps: Vec::new(),
                });
            }
        }
    }
    let sends = messages.len();
    let mut reads = SharedReads::collect(&plans, elem, &mut messages);

    // Pass 2: each step's message frontier; sends take theirs as deps.
    let mut reduce_bytes = vec![0; spec.world];
    let mut matched = 0;
    for plan in &plans {
        let rank = plan.rank;
        let mut frontier: Vec<Vec<usize>> = Vec::with_capacity(plan.steps.len());
        for (index, step) in plan.steps.iter().enumerate() {
            let mut f: Vec<usize> = Vec::new();
            for &d in &step.deps {
                if !matches!(plan.steps[d].op, Op::Send { .. }) {
                    f.extend_from_slice(&frontier[d]);
                }
            }
            match &step.op {
                Op::Recv { peer, tag, dst } | Op::RecvReduce { peer, tag, dst } => {
                    let id = *by_key.get(&(*peer, rank, *tag)).ok_or_else(|| {
                        format!("rank {rank} receives tag {tag} from {peer}, which never sends it")
                    })?;
                    if messages[id].bytes != dst.len as u64 * elem {
                        return Err(format!("message {id}: send and receive lengths differ"));
                    }
                    matched += 1;
                    f.push(id);
                    if matches!(step.op, Op::RecvReduce { .. }) {
                        reduce_bytes[rank] += dst.len as u64 * elem;
                    }
                }
                Op::Reduce { dst, .. } => reduce_bytes[rank] += dst.len as u64 * elem,
                Op::Send { peer, tag, .. } => {
                    let id = by_key[&(rank, *peer, *tag)];
                    f.sort_unstable();
                    f.dedup();
                    messages[id].deps = f;
                    frontier.push(Vec::new());
                    continue;
                }
                Op::Copy { .. } => {}
                Op::Expose { flag, .. } => {
                    reads.exposed_after.insert((rank, *flag), f.clone());
                }
                Op::PeerRead { dst, .. } | Op::PeerReadReduce { dst, .. } => {
                    let id = reads.by_step[&(rank, index)];
                    f.sort_unstable();
                    f.dedup();
                    messages[id].deps = std::mem::take(&mut f);
                    f.push(id);
                    if matches!(step.op, Op::PeerReadReduce { .. }) {
                        reduce_bytes[rank] += dst.len as u64 * elem;
                    }
                }
                Op::Release { flag, .. } => {
                    f.extend(reads.of_flag.get(&(rank, *flag)).into_iter().flatten());
                }
            }
            f.sort_unstable();
            f.dedup();
            frontier.push(f);
        }
    }
    if matched != sends {
        return Err(format!(
            "{} of {} messages are never received",
            sends - matched,
            sends
        ));
    }
    reads.add_expose_deps(&plans, &mut messages)?;
    Ok(CollectiveDag {
        collective: spec.collective,
        algorithm: algo.name.to_string(),
        world: spec.world,
        bytes_per_rank: spec.bytes,
        messages,
        placement,
        reduce_bytes,
    })
}

/// The peer reads of shared-memory plans, as messages from exposer to reader.
#[derive(Default)]
struct SharedReads {
    /// `(reader, step index)` -> message id.
    by_step: HashMap<(usize, usize), usize>,
    /// `(exposer, flag)` -> the messages reading that region.
    of_flag: HashMap<(usize, u32), Vec<usize>>,
    /// `(exposer, flag)` -> messages delivered before the Expose completes.
    exposed_after: HashMap<(usize, u32), Vec<usize>>,
}

impl SharedReads {
    /// One message per `PeerRead`/`PeerReadReduce`, appended to `messages`.
    fn collect(plans: &[shoal_plan::Plan], elem: u64, messages: &mut Vec<Message>) -> SharedReads {
        let mut reads = SharedReads::default();
        for plan in plans {
            for (index, step) in plan.steps.iter().enumerate() {
                if let Op::PeerRead {
                    peer, flag, dst, ..
                }
                | Op::PeerReadReduce {
                    peer, flag, dst, ..
                } = &step.op
                {
                    let id = messages.len();
                    messages.push(Message {
                        id,
                        src_rank: *peer,
                        dst_rank: plan.rank,
                        bytes: dst.len as u64 * elem,
                        deps: Vec::new(),
                    });
                    reads.by_step.insert((plan.rank, index), id);
                    reads.of_flag.entry((*peer, *flag)).or_default().push(id);
                }
            }
        }
        reads
    }

    /// A read also waits for what its region's Expose waited for.
    fn add_expose_deps(
        &self,
        plans: &[shoal_plan::Plan],
        messages: &mut [Message],
    ) -> Result<(), String> {
        for plan in plans {
            for (index, step) in plan.steps.iter().enumerate() {
                if let Op::PeerRead { peer, flag, .. } | Op::PeerReadReduce { peer, flag, .. } =
                    &step.op
                {
                    let exposed = self.exposed_after.get(&(*peer, *flag)).ok_or_else(|| {
                        format!(
                            "rank {} reads flag {flag} of {peer}, which never exposes it",
                            plan.rank
                        )
                    })?;
                    let deps = &mut messages[self.by_step[&(plan.rank, index)]].deps;
                    deps.extend_from_slice(exposed);
                    deps.sort_unstable();
                    deps.dedup();
                }
            }
        }
        Ok(())
    }
}

impl CollectiveDag {
    /// Total bytes carried by all messages.
    pub fn total_bytes(&self) -> u64 {
        self.messages.iter().map(|m| m.bytes).sum()
    }

    /// Messages with no dependencies: they start at time 0.
    pub fn roots(&self) -> impl Iterator<Item = &Message> {
        self.messages.iter().filter(|m| m.deps.is_empty())
    }

    /// `dependents[m]`: the messages that list `m` in their deps.
    pub fn dependents(&self) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.messages.len()];
        for m in &self.messages {
            for &d in &m.deps {
                out[d].push(m.id);
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
            for &d in &m.deps {
                assert_eq!(dag.messages[d].dst_rank, m.src_rank);
            }
        }
        // Longest dependency chain: 2(p-1) messages.
        let mut depth = vec![0; dag.messages.len()];
        for _ in 0..dag.messages.len() {
            for m in &dag.messages {
                depth[m.id] = 1 + m.deps.iter().map(|&d| depth[d]).max().unwrap_or(0);
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
    fn bad_specs_are_named() {
        let spec = DagSpec::new(Collective::Allreduce, "nope", 4, 64);
        assert!(build(&spec, None)
            .unwrap_err()
            .contains("unknown allreduce algorithm"));
        let spec = DagSpec::new(Collective::Allreduce, "ring", 4, 64);
        assert!(build(&spec, Some(vec![0, 1]))
            .unwrap_err()
            .contains("placement"));
    }
}
