//! Pairwise-exchange alltoall: in step `s` rank `r` sends its block for
//! `r + s` and receives the block of `r - s`. Each step waits for the last,
//! so every rank talks to one peer at a time and no receiver is flooded.

use crate::algorithms::cost::Model;
use crate::algorithms::{Algorithm, CostParams};
use crate::builder::{Msg, PlanBuilder};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm =
    Algorithm { name: "pairwise", collective: Collective::Alltoall, generate, cost };

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n) = (shape.world, shape.count);
    b.copy(Region::input(rank * n, n), Region::output(rank * n, n));
    let mut previous: Vec<usize> = Vec::new();
    for s in 1..w {
        let (to, from) = ((rank + s) % w, (rank + w - s) % w);
        let mut current = b.message(Msg::Send, to, s, Region::input(to * n, n), &previous);
        current.extend(b.message(Msg::Recv, from, s, Region::output(from * n, n), &previous));
        if !current.is_empty() {
            previous = current;
        }
    }
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    (shape.world - 1) as f64 * m.msg(shape.count)
}
