//! How algorithms cut the world and the data: blocks per rank, pipelined
//! pieces, rank rotation around a root, and the power-of-two fold.
//!
//! Kept in one place so every generator splits data the same way; a sender
//! and a receiver must agree on every piece boundary without talking.

use std::ops::Range;

use crate::plan::Region;

/// Offset and length of block `i` when `count` elements are split over
/// `world` ranks as evenly as possible (the first `count % world` blocks get
/// one extra element), so counts not divisible by the world size still work.
pub fn block(i: usize, world: usize, count: usize) -> (usize, usize) {
    let base = count / world;
    let extra = count % world;
    (i * base + i.min(extra), base + usize::from(i < extra))
}

/// Number of pieces of at most `chunk` elements that `len` elements need.
pub fn piece_count(len: usize, chunk: usize) -> usize {
    len.div_ceil(chunk.max(1))
}

/// The `(offset, len)` of each piece of at most `chunk` elements of a
/// transfer of `len` elements; nothing for an empty transfer.
pub fn pieces(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunk = chunk.max(1);
    (0..piece_count(len, chunk)).map(move |k| (k * chunk, chunk.min(len - k * chunk)))
}

/// `ceil(log2(n))`, the number of rounds of a doubling algorithm over `n` ranks.
pub fn log2_ceil(n: usize) -> u32 {
    n.max(1).next_power_of_two().trailing_zeros()
}

/// Position of `rank` when ranks are renumbered so that `root` becomes 0;
/// rooted algorithms are written for root 0 and rotated by this.
pub fn vrank(rank: usize, root: usize, world: usize) -> usize {
    (rank + world - root) % world
}

/// Inverse of [`vrank`].
pub fn from_vrank(v: usize, root: usize, world: usize) -> usize {
    (v + root) % world
}

/// A vector cut into one block per position (rank or virtual rank).
#[derive(Clone, Debug)]
pub struct Blocks(Vec<Region>);

impl Blocks {
    /// `region` split over `world` blocks with [`block`].
    pub fn even(region: Region, world: usize) -> Blocks {
        Blocks(
            (0..world)
                .map(|i| {
                    let (off, len) = block(i, world, region.len);
                    region.sub(off, len)
                })
                .collect(),
        )
    }

    /// `world` consecutive blocks of `n` elements starting at `start`.
    pub fn uniform(start: Region, world: usize, n: usize) -> Blocks {
        Blocks(
            (0..world)
                .map(|i| Region::new(start.buf, start.offset + i * n, n))
                .collect(),
        )
    }

    /// Arbitrary blocks, e.g. some in scratch and one in the output.
    pub fn from_regions(regions: Vec<Region>) -> Blocks {
        Blocks(regions)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, i: usize) -> Region {
        self.0[i]
    }

    /// The consecutive blocks `range` as one region; they must be contiguous.
    /// An empty range gives an empty region.
    pub fn span(&self, range: Range<usize>) -> Region {
        if range.is_empty() {
            return Region::new(self.0[0].buf, self.0[0].offset, 0);
        }
        let first = self.0[range.start];
        let len = range.clone().map(|i| self.0[i].len).sum();
        debug_assert!(range
            .clone()
            .skip(1)
            .all(|i| self.0[i].buf == first.buf && self.0[i].offset == self.0[i - 1].end()));
        Region::new(first.buf, first.offset, len)
    }
}

/// The fold that lets recursive doubling and halving run on any group size.
///
/// With `pow2` the largest power of two `<= world` and `rem = world - pow2`,
/// each even rank below `2 * rem` hands its data to the next odd rank and sits
/// out; the `pow2` survivors run the power-of-two algorithm under virtual
/// ranks, and the helpers get the result back at the end. Survivor `v` stands
/// for the original ranks [`Fold::ranks_of`]`(v)`, which are contiguous, so
/// block spans stay contiguous too.
#[derive(Clone, Copy, Debug)]
pub struct Fold {
    pub world: usize,
    pub pow2: usize,
    pub rem: usize,
}

/// What a rank does under a [`Fold`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldRole {
    /// Hands its data to `survivor` and waits for the result.
    Helper { survivor: usize },
    /// Takes part as virtual rank `vrank`, on behalf of `helper` too if any.
    Survivor { vrank: usize, helper: Option<usize> },
}

impl Fold {
    pub fn new(world: usize) -> Fold {
        let pow2 = if world == 0 { 0 } else { 1 << world.ilog2() };
        Fold {
            world,
            pow2,
            rem: world - pow2,
        }
    }

    pub fn role(&self, rank: usize) -> FoldRole {
        if rank < 2 * self.rem {
            if rank.is_multiple_of(2) {
                FoldRole::Helper { survivor: rank + 1 }
            } else {
                FoldRole::Survivor {
                    vrank: rank / 2,
                    helper: Some(rank - 1),
                }
            }
        } else {
            FoldRole::Survivor {
                vrank: rank - self.rem,
                helper: None,
            }
        }
    }

    /// The real rank of survivor `v`.
    pub fn rank_of(&self, v: usize) -> usize {
        if v < self.rem {
            2 * v + 1
        } else {
            v + self.rem
        }
    }

    /// The original ranks that survivor `v` stands for.
    pub fn ranks_of(&self, v: usize) -> Range<usize> {
        if v < self.rem {
            2 * v..2 * v + 2
        } else {
            v + self.rem..v + self.rem + 1
        }
    }

    /// The original ranks that the survivors `vs` stand for.
    pub fn ranks_of_span(&self, vs: Range<usize>) -> Range<usize> {
        self.ranks_of(vs.start).start..self.ranks_of(vs.end - 1).end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_vector() {
        for world in 1..=16 {
            for count in [0, 1, 7, 16, 97] {
                let mut next = 0;
                for i in 0..world {
                    let (off, len) = block(i, world, count);
                    assert_eq!(off, next);
                    next += len;
                }
                assert_eq!(next, count);
            }
        }
    }

    #[test]
    fn pieces_cover_the_transfer() {
        let p: Vec<_> = pieces(7, 3).collect();
        assert_eq!(p, vec![(0, 3), (3, 3), (6, 1)]);
        assert_eq!(pieces(0, 3).count(), 0);
    }

    #[test]
    fn fold_survivors_cover_all_ranks() {
        for world in 1..=16 {
            let f = Fold::new(world);
            assert_eq!(f.ranks_of_span(0..f.pow2), 0..world);
            for v in 0..f.pow2 {
                let r = f.rank_of(v);
                assert!(matches!(f.role(r), FoldRole::Survivor { vrank, .. } if vrank == v));
            }
        }
    }
}
