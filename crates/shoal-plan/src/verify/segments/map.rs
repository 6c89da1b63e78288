//! Between the call's elements and the model's: each segment of a space is
//! one element of the model, and each block of a buffer as many as its
//! space has segments.

use super::layout::Layout;
use crate::plan::{Buf, CallShape, Op, Plan, Region, Step};
use crate::verify::exec::slot;
use crate::verify::matching::Matches;

/// The spaces' cuts, and where each block lies in the model.
pub struct Map {
    layout: Layout,
    /// Each space's cuts, sorted: its ends and every cut between.
    cuts: Vec<Vec<usize>>,
}

impl Map {
    /// None when the model would have more than `limit` elements.
    pub fn new(mut layout: Layout, cuts: Vec<Vec<usize>>, limit: usize) -> Option<Map> {
        let mut total = 0usize;
        for bufs in &mut layout.bufs {
            for blocks in bufs {
                let mut at = 0;
                for b in blocks {
                    b.model_start = at;
                    at += cuts[b.space].len() - 1;
                }
                total += at;
            }
        }
        (total <= limit).then_some(Map { layout, cuts })
    }

    /// Segments of `space`.
    fn count(&self, space: usize) -> usize {
        self.cuts[space].len().saturating_sub(1)
    }

    /// The model's call shape: a count (or counts) of segments.
    pub fn shape(&self, shape: &CallShape) -> CallShape {
        let counts = shape
            .counts
            .as_ref()
            .map(|c| (0..c.len()).map(|space| self.count(space)).collect());
        let count = if counts.is_none() {
            self.count(0)
        } else {
            shape.count
        };
        CallShape {
            count,
            counts,
            ..shape.clone()
        }
    }

    /// `plan` in the model's elements.
    pub fn plan(&self, plan: &Plan, matches: &Matches) -> Plan {
        let rank = plan.rank;
        let scratch = self.layout.scratch_space(rank);
        let steps = plan
            .steps
            .iter()
            .map(|s| Step {
                op: self.op(rank, &s.op, matches),
                deps: s.deps.clone(),
            })
            .collect();
        Plan {
            rank,
            steps,
            scratch_len: self.count(scratch),
        }
    }

    fn op(&self, rank: usize, op: &Op, matches: &Matches) -> Op {
        let m = |r: Region| self.region(rank, r);
        match *op {
            Op::Send { peer, tag, src } => Op::Send {
                peer,
                tag,
                src: m(src),
            },
            Op::Recv { peer, tag, dst } => Op::Recv {
                peer,
                tag,
                dst: m(dst),
            },
            Op::RecvReduce { peer, tag, dst } => Op::RecvReduce {
                peer,
                tag,
                dst: m(dst),
            },
            Op::Copy { src, dst } => Op::Copy {
                src: m(src),
                dst: m(dst),
            },
            Op::Reduce { src, dst } => Op::Reduce {
                src: m(src),
                dst: m(dst),
            },
            Op::Expose { flag, src, slot } => Op::Expose {
                flag,
                src: m(src),
                slot,
            },
            Op::PeerRead {
                peer,
                flag,
                offset,
                dst,
            }
            | Op::PeerReadReduce {
                peer,
                flag,
                offset,
                dst,
            } => {
                // The offset is relative to the peer's exposed region.
                let src = matches.exposures[peer][&flag].src;
                let at = |p| self.position(peer, slot(src.buf), p);
                let offset = at(src.offset + offset) - at(src.offset);
                let reduce = matches!(op, Op::PeerReadReduce { .. });
                Op::peer_read(peer, flag, offset, m(dst), reduce)
            }
            Op::Release { .. } => op.clone(),
        }
    }

    fn region(&self, rank: usize, r: Region) -> Region {
        let start = self.position(rank, slot(r.buf), r.offset);
        let end = self.position(rank, slot(r.buf), r.end());
        Region::new(r.buf, start, end - start)
    }

    /// Where the segment starting at element `p` of `rank`'s buffer `slot`
    /// is in the model (the buffer's end maps to the model buffer's end).
    fn position(&self, rank: usize, slot: usize, p: usize) -> usize {
        let blocks = &self.layout.bufs[rank][slot];
        match self.layout.locate(rank, slot, p) {
            Some((i, local)) => {
                let b = blocks[i];
                b.model_start + self.cuts[b.space].partition_point(|&c| c < local)
            }
            None => blocks
                .last()
                .map_or(0, |b| b.model_start + self.count(b.space)),
        }
    }

    /// The call's element where model element `index` of `rank`'s `buf` starts.
    pub fn element(&self, rank: usize, buf: Buf, index: usize) -> usize {
        let blocks = &self.layout.bufs[rank][slot(buf)];
        let i = blocks.partition_point(|b| b.model_start <= index) - 1;
        let b = blocks[i];
        b.start + self.cuts[b.space][index - b.model_start]
    }
}
