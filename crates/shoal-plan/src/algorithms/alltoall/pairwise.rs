//! Pairwise-exchange alltoall: in step `s` rank `r` sends its block for
//! `r + s` and receives the block of `r - s`. Each step waits for the last
//! (piece by piece), so every rank talks to about one peer at a time and no
//! receiver is flooded. Takes per-rank counts (alltoallv).

use crate::algorithms::cost::Model;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::pieces;
use crate::plan::{CallShape, Collective, Op, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "pairwise",
    collective: Collective::Alltoall,
    generate,
    cost,
    needs: Needs {
        counts: true,
        ..Needs::NOTHING
    },
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let w = shape.world;
    let block_to = |dst: usize| Region::input(shape.send_offset(rank, dst), shape.sends(rank, dst));
    let block_from =
        |src: usize| Region::output(shape.recv_offset(rank, src), shape.sends(src, rank));
    b.copy(block_to(rank), block_from(rank));
    // Piece k of step s waits for piece k of step s - 1 (both directions):
    // one peer at a time, yet pieces still stream. With per-rank counts the
    // two directions of a step may have different numbers of pieces.
    let mut previous: Vec<Vec<usize>> = Vec::new();
    for s in 1..w {
        let (to, from) = ((rank + s) % w, (rank + w - s) % w);
        let (out, into) = (block_to(to), block_from(from));
        let sends: Vec<(usize, usize)> = pieces(out.len, b.chunk()).collect();
        let recvs: Vec<(usize, usize)> = pieces(into.len, b.chunk()).collect();
        previous = (0..sends.len().max(recvs.len()))
            .map(|k| {
                let after = previous.get(k).cloned().unwrap_or_default();
                let tag = b.tag(s, k);
                let mut posted = Vec::new();
                if let Some(&(off, len)) = sends.get(k) {
                    let src = out.sub(off, len);
                    posted.push(b.push(Op::Send { peer: to, tag, src }, &after));
                }
                if let Some(&(off, len)) = recvs.get(k) {
                    let dst = into.sub(off, len);
                    posted.push(b.push(
                        Op::Recv {
                            peer: from,
                            tag,
                            dst,
                        },
                        &after,
                    ));
                }
                posted
            })
            .collect();
    }
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let largest = match &shape.counts {
        Some(c) => c.iter().copied().max().unwrap_or(0),
        None => shape.count,
    };
    (shape.world - 1) as f64 * m.msg(largest)
}
