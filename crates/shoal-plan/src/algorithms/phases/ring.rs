//! Ring phases: each rank sends to `rank + 1` and receives from `rank - 1`,
//! one block per round, `world - 1` rounds. Bandwidth-optimal; every element
//! is reduced along one path, so the result is the same bits everywhere.

use crate::builder::PlanBuilder;
use crate::partition::Blocks;

/// A ring of `size` ranks: where this rank sits and who its neighbours are.
/// The whole group is one ring; topology-aware algorithms run rings over
/// the ranks of one host, or over one rank per host.
#[derive(Clone, Copy, Debug)]
pub struct Ring {
    pub size: usize,
    pub next: usize,
    pub prev: usize,
}

impl Ring {
    /// The ring of every rank of the group, in rank order.
    pub fn whole(b: &PlanBuilder) -> Ring {
        let (r, w) = (b.rank(), b.world());
        Ring {
            size: w,
            next: (r + 1) % w,
            prev: (r + w - 1) % w,
        }
    }

    /// The ring of `members` (ranks in ring order) at position `pos`.
    pub fn of(members: &[usize], pos: usize) -> Ring {
        let k = members.len();
        Ring {
            size: k,
            next: members[(pos + 1) % k],
            prev: members[(pos + k - 1) % k],
        }
    }
}

/// Ring reduce-scatter. Before: every block holds this rank's contribution.
/// After: block `pos` holds the reduction over all ranks (other blocks hold
/// partial sums). `pos` is this rank's ring position (rank, or vrank when
/// rotated); ring neighbours are the neighbouring ranks either way.
/// Uses rounds `round0 .. round0 + world - 1`.
pub fn reduce_scatter(b: &mut PlanBuilder, pos: usize, blocks: &Blocks, round0: usize) {
    let ring = Ring::whole(b);
    reduce_scatter_in(b, &ring, pos, blocks, round0);
}

/// [`reduce_scatter`] over the ranks of `ring` (`blocks` has `ring.size` blocks).
pub fn reduce_scatter_in(
    b: &mut PlanBuilder,
    ring: &Ring,
    pos: usize,
    blocks: &Blocks,
    round0: usize,
) {
    let w = ring.size;
    for s in 0..w.saturating_sub(1) {
        b.send(ring.next, round0 + s, blocks.get((pos + 2 * w - s - 1) % w));
        b.recv_reduce(ring.prev, round0 + s, blocks.get((pos + 2 * w - s - 2) % w));
    }
}

/// Ring allgather. Before: block `pos` is valid. After: all blocks are.
/// Uses rounds `round0 .. round0 + world - 1`.
pub fn allgather(b: &mut PlanBuilder, pos: usize, blocks: &Blocks, round0: usize) {
    let ring = Ring::whole(b);
    allgather_in(b, &ring, pos, blocks, round0);
}

/// [`allgather`] over the ranks of `ring` (`blocks` has `ring.size` blocks).
pub fn allgather_in(b: &mut PlanBuilder, ring: &Ring, pos: usize, blocks: &Blocks, round0: usize) {
    let w = ring.size;
    for s in 0..w.saturating_sub(1) {
        b.send(ring.next, round0 + s, blocks.get((pos + w - s) % w));
        b.recv(ring.prev, round0 + s, blocks.get((pos + 2 * w - s - 1) % w));
    }
}
