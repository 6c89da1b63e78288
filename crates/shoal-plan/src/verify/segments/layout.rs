//! Where each rank's buffers lie in *spaces*: runs of elements cut alike
//! wherever they appear, because the buffer contract ties them together
//! (the table in `plan.rs`), or because they are one rank's scratch.

use crate::plan::{Buf, CallShape, Collective, Plan};
use crate::verify::exec::slot;

/// A run of one buffer that lies in one space.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub start: usize,
    pub len: usize,
    pub space: usize,
    /// Where the block starts in the model's buffer.
    pub model_start: usize,
}

/// Where each rank's buffers lie in spaces.
pub struct Layout {
    /// `bufs[rank][slot(buf)]`: the non-empty blocks of the buffer, in order.
    pub bufs: Vec<[Vec<Block>; 3]>,
    /// Each space's length: the contract's spaces, then each rank's scratch.
    pub lens: Vec<usize>,
    /// Each space's blocks, as `(rank, slot, start)`.
    pub placements: Vec<Vec<(usize, usize, usize)>>,
}

impl Layout {
    /// None when the buffers have more blocks than `limit` (each block is
    /// at least one segment).
    pub fn of(shape: &CallShape, plans: &[Plan], limit: usize) -> Option<Layout> {
        let mut lens = shape
            .counts
            .as_ref()
            .map_or_else(|| vec![shape.count], |c| c.to_vec());
        let contract = lens.len();
        lens.extend(plans.iter().map(|p| p.scratch_len));
        let mut layout = Layout {
            bufs: Vec::with_capacity(plans.len()),
            placements: vec![Vec::new(); lens.len()],
            lens,
        };
        let mut total = 0;
        for (rank, plan) in plans.iter().enumerate() {
            let mut bufs: [Vec<Block>; 3] = Default::default();
            for buf in [Buf::Input, Buf::Output, Buf::Scratch] {
                let runs = match buf {
                    Buf::Scratch => vec![(plan.scratch_len, contract + rank)],
                    _ => contract_runs(shape, rank, buf),
                };
                bufs[slot(buf)] = layout.place(rank, buf, runs);
                total += bufs[slot(buf)].len();
                if total > limit {
                    return None;
                }
            }
            layout.bufs.push(bufs);
        }
        Some(layout)
    }

    /// The non-empty blocks of `rank`'s `buf`, from its `(len, space)` runs.
    fn place(&mut self, rank: usize, buf: Buf, runs: Vec<(usize, usize)>) -> Vec<Block> {
        let mut start = 0;
        let mut blocks = Vec::new();
        for (len, space) in runs {
            if len > 0 {
                let model_start = 0; // known once the cuts are
                blocks.push(Block {
                    start,
                    len,
                    space,
                    model_start,
                });
                self.placements[space].push((rank, slot(buf), start));
            }
            start += len;
        }
        blocks
    }

    /// The space of `rank`'s scratch.
    pub fn scratch_space(&self, rank: usize) -> usize {
        self.lens.len() - self.bufs.len() + rank
    }

    /// The block holding element `p` of `rank`'s buffer `slot`, and `p`'s
    /// offset in it; None at the buffer's end.
    pub fn locate(&self, rank: usize, slot: usize, p: usize) -> Option<(usize, usize)> {
        let blocks = &self.bufs[rank][slot];
        let i = blocks.partition_point(|b| b.start <= p).checked_sub(1)?;
        let b = blocks[i];
        (p < b.start + b.len).then_some((i, p - b.start))
    }
}

/// The `(len, space)` runs of `rank`'s Input or Output, as the contract
/// (the table in `plan.rs`) lays out its blocks.
fn contract_runs(shape: &CallShape, rank: usize, buf: Buf) -> Vec<(usize, usize)> {
    let Some(counts) = &shape.counts else {
        // One space of `count` elements: the buffer is a whole number of blocks.
        let n = shape.count;
        return match n {
            0 => Vec::new(),
            _ => vec![(n, 0); shape.buffer_len(rank, buf) / n],
        };
    };
    let w = shape.world;
    let own = vec![(counts[rank], rank)];
    let all = || counts.iter().copied().zip(0..w).collect();
    match (shape.collective, buf) {
        (Collective::Allgather, Buf::Input) | (Collective::ReduceScatter, Buf::Output) => own,
        (Collective::Allgather, _) | (Collective::ReduceScatter, _) => all(),
        // Block d of sender s's Input is block s of receiver d's Output.
        (Collective::Alltoall, Buf::Input) => (0..w)
            .map(|d| (counts[rank * w + d], rank * w + d))
            .collect(),
        (Collective::Alltoall, _) => (0..w)
            .map(|s| (counts[s * w + rank], s * w + rank))
            .collect(),
        _ => unreachable!("only allgather, reduce_scatter and alltoall take counts"),
    }
}
