//! The host phases of hierarchical allreduce with in-network aggregation
//! (NetReduce's parallel all-reduce with the switch as the inter-host
//! step): a ring reduce-scatter among the ranks of each host, after which
//! local rank `j` holds its host's sum of shard `j`; the switch then sums
//! shard `j` over the hosts (rank `j` of every host is one switch job, run
//! by the runtime, not by a plan); a ring allgather inside each host
//! spreads the shards. The plans here are the two host phases; they are no
//! algorithm of their own (the runtime's `hierarchical_ina` runs them
//! around its switch call), and their shards are [`shard`]'s.

use crate::algorithms::phases::ring::{self, Ring};
use crate::builder::PlanBuilder;
use crate::partition::Blocks;
use crate::plan::{CallShape, Plan, Region};

/// The name users give to force it (`algorithm="hierarchical_ina"`).
pub const NAME: &str = "hierarchical_ina";

/// The shards of the output, one per local rank: `(offset, len)` in
/// elements of local rank `j`'s shard.
pub fn shard(shape: &CallShape, j: usize) -> (usize, usize) {
    let (_, local) = shape.layout();
    let s = Blocks::even(Region::output(0, shape.count), local).get(j);
    (s.offset, s.len)
}

/// This rank's host ring and position on it, and the host's shards.
fn host_ring(shape: &CallShape, rank: usize) -> (Ring, usize, Blocks) {
    let (_, local) = shape.layout();
    let (host, j) = (rank / local, rank % local);
    let members: Vec<usize> = (0..local).map(|i| host * local + i).collect();
    let shards = Blocks::even(Region::output(0, shape.count), local);
    (Ring::of(&members, j), j, shards)
}

/// Phase 1: the input copied to the output, then reduced-scattered inside
/// the host, so that shard `j` of local rank `j`'s output is its host's sum.
pub fn reduce_scatter(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    b.copy(
        Region::input(0, shape.count),
        Region::output(0, shape.count),
    );
    let (ring, j, shards) = host_ring(shape, rank);
    ring::reduce_scatter_in(&mut b, &ring, j, &shards, 0);
    b.finish()
}

/// Phase 3: every local rank's shard (by now the sum over all hosts)
/// gathered into every output of the host.
pub fn allgather(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (ring, j, shards) = host_ring(shape, rank);
    ring::allgather_in(&mut b, &ring, j, &shards, 0);
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Collective, Op};

    fn shape(world: usize, local: usize, count: usize) -> CallShape {
        CallShape {
            ranks_per_host: local,
            ..CallShape::new(Collective::Allreduce, world, count, 1 << 20)
        }
    }

    #[test]
    fn shards_cover_the_buffer_once_even_for_odd_counts() {
        for (local, count) in [(1, 5), (2, 7), (3, 100_003), (3, 2), (4, 0)] {
            let s = shape(2 * local, local, count);
            let mut next = 0;
            for j in 0..local {
                let (off, len) = shard(&s, j);
                assert_eq!(off, next, "local {local} count {count}");
                next += len;
            }
            assert_eq!(next, count);
        }
    }

    #[test]
    fn host_phases_talk_only_inside_the_host() {
        let s = shape(6, 3, 1001);
        for rank in 0..6 {
            let host = rank / 3;
            for plan in [reduce_scatter(&s, rank), allgather(&s, rank)] {
                let peers = plan.steps.iter().filter_map(|st| match st.op {
                    Op::Send { peer, .. } | Op::Recv { peer, .. } | Op::RecvReduce { peer, .. } => {
                        Some(peer)
                    }
                    _ => None,
                });
                for peer in peers {
                    assert_eq!(peer / 3, host, "rank {rank} talks to {peer}");
                }
            }
        }
    }
}
