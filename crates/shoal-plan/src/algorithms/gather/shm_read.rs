//! Shared-memory gather: every rank but the root exposes its Input, and the
//! root copies each straight from the peer's memory into its block of
//! Output. Ranks of one host only.

use crate::algorithms::phases::shared::{block_read_cost, INPUTS};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_read",
    collective: Collective::Gather,
    generate,
    cost,
    needs: Needs {
        peers_memory: true,
        ..Needs::NOTHING
    },
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let (w, n, root) = (shape.world, shape.count, shape.root);
    let mut p = Plan::new(rank);
    let input = Region::input(0, n);
    if rank == root {
        p.copy(input, Region::output(rank * n, n), vec![]);
        for q in (0..w).filter(|&q| q != root) {
            p.peer_read(q, INPUTS, 0, Region::output(q * n, n), false, vec![]);
        }
    } else {
        let exposed = p.expose_slot(INPUTS, input, vec![]);
        p.release(INPUTS, 1, vec![exposed]);
    }
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    block_read_cost(shape, elem_size, params, shape.world - 1, false, 1)
}
