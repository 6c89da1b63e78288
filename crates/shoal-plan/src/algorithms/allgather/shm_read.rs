//! Shared-memory allgather: every rank exposes its Input and copies every
//! peer's straight from its memory into its block of Output. Ranks of one
//! host only.

use crate::algorithms::phases::shared::{block_read_cost, INPUTS};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_read",
    collective: Collective::Allgather,
    generate,
    cost,
    needs: Needs {
        peers_memory: true,
        ..Needs::NOTHING
    },
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let (w, n) = (shape.world, shape.count);
    let mut p = Plan::new(rank);
    let input = Region::input(0, n);
    p.copy(input, Region::output(rank * n, n), vec![]);
    if w == 1 {
        return p;
    }
    let exposed = p.expose_slot(INPUTS, input, vec![]);
    for q in (0..w).filter(|&q| q != rank) {
        p.peer_read(q, INPUTS, 0, Region::output(q * n, n), false, vec![]);
    }
    p.release(INPUTS, (w - 1) as u32, vec![exposed]);
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    block_read_cost(shape, elem_size, params, shape.world - 1, false, 1)
}
