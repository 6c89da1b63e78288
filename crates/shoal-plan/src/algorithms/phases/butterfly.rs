//! Butterfly phases over the power-of-two survivors of a [`Fold`]: recursive
//! halving (reduce-scatter) and recursive doubling (allgather), plus the fold
//! in and out that let them serve any world size.
//!
//! Blocks are indexed by *original* rank; survivor `v` owns the blocks of
//! `fold.ranks_of(v)`, and a range of survivors owns a contiguous span.

use crate::builder::PlanBuilder;
use crate::partition::{Blocks, Fold};
use crate::plan::Region;

/// Number of butterfly rounds among the survivors.
pub fn rounds(fold: &Fold) -> usize {
    fold.pow2.trailing_zeros() as usize
}

/// Recursive-halving reduce-scatter. Before: all blocks hold this survivor's
/// contribution (helpers' already folded in). After: the blocks of
/// `fold.ranks_of(v)` hold the full reduction. Uses `rounds(fold)` rounds.
pub fn halving_reduce_scatter(
    b: &mut PlanBuilder,
    fold: &Fold,
    v: usize,
    blocks: &Blocks,
    round0: usize,
) {
    let mut d = fold.pow2 / 2;
    let mut round = round0;
    while d > 0 {
        let lo = v & !(2 * d - 1);
        let (mine, theirs) = if v & d == 0 {
            (lo, lo + d)
        } else {
            (lo + d, lo)
        };
        let peer = fold.rank_of(v ^ d);
        b.send(peer, round, span(fold, blocks, theirs, d));
        b.recv_reduce(peer, round, span(fold, blocks, mine, d));
        d /= 2;
        round += 1;
    }
}

/// Recursive-doubling allgather. Before: the blocks of `fold.ranks_of(v)`
/// are valid. After: all blocks are. Uses `rounds(fold)` rounds.
pub fn doubling_allgather(
    b: &mut PlanBuilder,
    fold: &Fold,
    v: usize,
    blocks: &Blocks,
    round0: usize,
) {
    let mut d = 1;
    let mut round = round0;
    while d < fold.pow2 {
        let peer = fold.rank_of(v ^ d);
        b.send(peer, round, span(fold, blocks, v & !(d - 1), d));
        b.recv(peer, round, span(fold, blocks, (v ^ d) & !(d - 1), d));
        d *= 2;
        round += 1;
    }
}

/// The blocks owned by the `len` survivors starting at `first`.
fn span(fold: &Fold, blocks: &Blocks, first: usize, len: usize) -> Region {
    blocks.span(fold.ranks_of_span(first..first + len))
}
