//! The messages of shared-memory plans (`shm_*` algorithms: every rank on
//! one host, at most 16 of them, so plain maps are fast enough here).
//!
//! A `PeerRead`/`PeerReadReduce` of `peer`'s region `flag` is a message from
//! `peer` to the reader. It starts once the reader's own dependencies are
//! delivered *and* those of `peer`'s `Expose` of `flag` (the region holds
//! what the exposer built before exposing it). A `Release` of `flag` waits
//! for every read of it, so the exposer's later steps depend on them. Sends
//! and receives are matched as in the main builder.

use std::collections::HashMap;

use shoal_plan::{Op, Plan};

use super::{DagError, Message, Parts};

/// Builds the messages of `plans` (in rank order, elements of `elem` bytes).
pub(super) fn build(plans: &[Plan], elem: u64) -> Result<Parts, DagError> {
    let world = plans.len();
    let mut messages = Vec::new();
    // (src, dst, tag) -> id of a Send; (reader, step) -> id of a read.
    let mut sends = HashMap::new();
    let mut reads = HashMap::new();
    // (exposer, flag) -> the reads of that region.
    let mut reads_of: HashMap<(usize, u32), Vec<u32>> = HashMap::new();
    for plan in plans {
        for (index, step) in plan.steps.iter().enumerate() {
            let (src, dst, bytes) = match &step.op {
                Op::Send { peer, tag, src } => {
                    if sends
                        .insert((plan.rank, *peer, *tag), messages.len())
                        .is_some()
                    {
                        return Err(DagError::SentTwice {
                            rank: plan.rank,
                            peer: *peer,
                            tag: *tag,
                        });
                    }
                    (plan.rank, *peer, src.len)
                }
                Op::PeerRead {
                    peer, flag, dst, ..
                }
                | Op::PeerReadReduce {
                    peer, flag, dst, ..
                } => {
                    reads.insert((plan.rank, index), messages.len());
                    reads_of
                        .entry((*peer, *flag))
                        .or_default()
                        .push(messages.len() as u32);
                    (*peer, plan.rank, dst.len)
                }
                _ => continue,
            };
            messages.push(Message {
                id: messages.len(),
                src_rank: src,
                dst_rank: dst,
                bytes: bytes as u64 * elem,
            });
        }
    }

    let mut deps: Vec<Vec<u32>> = vec![Vec::new(); messages.len()];
    let mut reduce_bytes = vec![0; world];
    // (exposer, flag) -> what its Expose waited for; (read id, exposer, flag).
    let mut exposed: HashMap<(usize, u32), Vec<u32>> = HashMap::new();
    let mut pending_reads = Vec::new();
    let mut received = 0;
    for plan in plans {
        let rank = plan.rank;
        let mut frontier: Vec<Vec<u32>> = Vec::with_capacity(plan.steps.len());
        for (index, step) in plan.steps.iter().enumerate() {
            let mut f: Vec<u32> = Vec::new();
            for &d in &step.deps {
                f.extend_from_slice(&frontier[d]);
            }
            match &step.op {
                Op::Recv { peer, tag, dst } | Op::RecvReduce { peer, tag, dst } => {
                    let &id = sends.get(&(*peer, rank, *tag)).ok_or(DagError::NeverSent {
                        rank,
                        peer: *peer,
                        tag: *tag,
                    })?;
                    if messages[id].bytes != dst.len as u64 * elem {
                        return Err(DagError::LengthsDiffer { message: id });
                    }
                    received += 1;
                    f.push(id as u32);
                    if matches!(step.op, Op::RecvReduce { .. }) {
                        reduce_bytes[rank] += dst.len as u64 * elem;
                    }
                }
                Op::Send { peer, tag, .. } => {
                    deps[sends[&(rank, *peer, *tag)]] = f;
                    f = Vec::new(); // a send's buffer is free at once
                }
                Op::Reduce { dst, .. } => reduce_bytes[rank] += dst.len as u64 * elem,
                Op::Copy { .. } => {}
                Op::Expose { flag, .. } => {
                    exposed.insert((rank, *flag), f.clone());
                }
                Op::PeerRead {
                    peer, flag, dst, ..
                }
                | Op::PeerReadReduce {
                    peer, flag, dst, ..
                } => {
                    let id = reads[&(rank, index)];
                    deps[id] = std::mem::take(&mut f);
                    f.push(id as u32);
                    pending_reads.push((id, *peer, *flag));
                    if matches!(step.op, Op::PeerReadReduce { .. }) {
                        reduce_bytes[rank] += dst.len as u64 * elem;
                    }
                }
                Op::Release { flag, .. } => {
                    f.extend(reads_of.get(&(rank, *flag)).into_iter().flatten());
                }
            }
            f.sort_unstable();
            f.dedup();
            frontier.push(f);
        }
    }
    if received != sends.len() {
        return Err(DagError::NeverReceived {
            unreceived: sends.len().abs_diff(received),
            messages: sends.len(),
        });
    }
    for (id, peer, flag) in pending_reads {
        let before = exposed.get(&(peer, flag)).ok_or(DagError::NeverExposed {
            message: id,
            peer,
            flag,
        })?;
        deps[id].extend_from_slice(before);
    }

    let mut dep_offsets = vec![0u32];
    let mut dep_ids = Vec::new();
    for mut d in deps {
        d.sort_unstable();
        d.dedup();
        dep_ids.extend_from_slice(&d);
        dep_offsets.push(dep_ids.len() as u32);
    }
    Ok((messages, dep_offsets, dep_ids, reduce_bytes))
}

#[cfg(test)]
mod tests {
    use crate::dag::{build, DagError, DagSpec};
    use shoal_plan::Collective;

    /// shm_flat allreduce on 4 ranks: every rank reads the 3 others' whole
    /// buffers, each read after its exposer's Expose (no deps: nothing is
    /// received before), and nothing else moves.
    #[test]
    fn shm_flat_reads_every_peer_once() {
        let mut spec = DagSpec::new(Collective::Allreduce, "shm_flat", 4, 4096);
        spec.ranks_per_host = 4;
        let dag = build(&spec, None).unwrap();
        assert_eq!(dag.messages.len(), 4 * 3);
        assert!(dag.messages.iter().all(|m| m.bytes == 4096));
        assert!(dag.messages.iter().all(|m| m.src_rank != m.dst_rank));
        assert_eq!(dag.reduce_bytes, vec![3 * 4096; 4]);
    }

    #[test]
    fn shared_memory_algorithms_refuse_several_hosts() {
        let mut spec = DagSpec::new(Collective::Allreduce, "shm_flat", 4, 4096);
        spec.ranks_per_host = 2;
        let err = build(&spec, None).unwrap_err();
        assert!(
            matches!(&err, DagError::Refused { algorithm, .. } if algorithm == "shm_flat"),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("shm_flat cannot serve this call"),
            "{err}"
        );
    }
}
