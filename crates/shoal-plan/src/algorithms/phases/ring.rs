//! Ring phases: each rank sends to `rank + 1` and receives from `rank - 1`,
//! one block per round, `world - 1` rounds. Bandwidth-optimal; every element
//! is reduced along one path, so the result is the same bits everywhere.

use crate::builder::PlanBuilder;
use crate::partition::Blocks;

/// Ring reduce-scatter. Before: every block holds this rank's contribution.
/// After: block `pos` holds the reduction over all ranks (other blocks hold
/// partial sums). `pos` is this rank's ring position (rank, or vrank when
/// rotated); ring neighbours are the neighbouring ranks either way.
/// Uses rounds `round0 .. round0 + world - 1`.
pub fn reduce_scatter(b: &mut PlanBuilder, pos: usize, blocks: &Blocks, round0: usize) {
    let w = b.world();
    let (next, prev) = neighbours(b);
    for s in 0..w.saturating_sub(1) {
        b.send(next, round0 + s, blocks.get((pos + 2 * w - s - 1) % w));
        b.recv_reduce(prev, round0 + s, blocks.get((pos + 2 * w - s - 2) % w));
    }
}

/// Ring allgather. Before: block `pos` is valid. After: all blocks are.
/// Uses rounds `round0 .. round0 + world - 1`.
pub fn allgather(b: &mut PlanBuilder, pos: usize, blocks: &Blocks, round0: usize) {
    let w = b.world();
    let (next, prev) = neighbours(b);
    for s in 0..w.saturating_sub(1) {
        b.send(next, round0 + s, blocks.get((pos + w - s) % w));
        b.recv(prev, round0 + s, blocks.get((pos + 2 * w - s - 1) % w));
    }
}

fn neighbours(b: &PlanBuilder) -> (usize, usize) {
    let (r, w) = (b.rank(), b.world());
    ((r + 1) % w, (r + w - 1) % w)
}
