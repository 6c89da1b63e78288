//! Pairwise-exchange alltoall: in step `s` rank `r` sends its block for
//! `r + s` and receives the block of `r - s`. Each step waits for the last
//! (piece by piece), so every rank talks to about one peer at a time and no
//! receiver is flooded.

use crate::algorithms::cost::Model;
use crate::algorithms::{Algorithm, CostParams};
use crate::builder::PlanBuilder;
use crate::partition::pieces;
use crate::plan::{CallShape, Collective, Op, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "pairwise",
    collective: Collective::Alltoall,
    generate,
    cost,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n) = (shape.world, shape.count);
    b.copy(Region::input(rank * n, n), Region::output(rank * n, n));
    // Piece k of step s waits for piece k of step s - 1 (both directions):
    // one peer at a time, yet pieces still stream.
    let mut previous: Vec<[usize; 2]> = Vec::new();
    for s in 1..w {
        let (to, from) = ((rank + s) % w, (rank + w - s) % w);
        let (out, into) = (Region::input(to * n, n), Region::output(from * n, n));
        previous = pieces(n, b.chunk())
            .enumerate()
            .map(|(k, (off, len))| {
                let after: Vec<usize> = previous.get(k).map(|p| p.to_vec()).unwrap_or_default();
                let tag = b.tag(s, k);
                let src = out.sub(off, len);
                let dst = into.sub(off, len);
                let sent = b.push(Op::Send { peer: to, tag, src }, &after);
                [
                    sent,
                    b.push(
                        Op::Recv {
                            peer: from,
                            tag,
                            dst,
                        },
                        &after,
                    ),
                ]
            })
            .collect();
    }
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    (shape.world - 1) as f64 * m.msg(shape.count)
}
