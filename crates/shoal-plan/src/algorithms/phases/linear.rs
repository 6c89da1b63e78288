//! Helpers for the linear ("direct") algorithms, where one rank talks to all.

use crate::builder::PlanBuilder;
use crate::plan::Region;

/// `out = ((slot(0) + slot(1)) + ...) + slot(world - 1)`: a fixed
/// combination order, so every rank that runs it gets the same bits.
pub fn reduce_in_rank_order(
    b: &mut PlanBuilder,
    slot: &dyn Fn(usize) -> Region,
    world: usize,
    out: Region,
) {
    b.copy(slot(0), out);
    for q in 1..world {
        b.reduce(slot(q), out);
    }
}
