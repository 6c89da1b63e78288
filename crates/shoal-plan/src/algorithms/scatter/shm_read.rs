//! Shared-memory scatter: the root exposes its Input and every other rank
//! copies its block straight from the root's memory into its Output. Ranks
//! of one host only.

use crate::algorithms::phases::shared::{block_read_cost, INPUTS};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_read",
    collective: Collective::Scatter,
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
    let output = Region::output(0, n);
    if rank != root {
        p.peer_read(root, INPUTS, rank * n, output, false, vec![]);
        return p;
    }
    p.copy(Region::input(rank * n, n), output, vec![]);
    if w > 1 {
        let exposed = p.expose_slot(INPUTS, Region::input(0, w * n), vec![]);
        p.release(INPUTS, (w - 1) as u32, vec![exposed]);
    }
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    block_read_cost(shape, elem_size, params, 1, false, shape.world)
}
