//! Shared-memory broadcast: the root exposes its Input and every other rank
//! copies it straight from the root's memory into its Output. Ranks of one
//! host only.

use crate::algorithms::phases::shared::{block_read_cost, INPUTS};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_read",
    collective: Collective::Broadcast,
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
        p.peer_read(root, INPUTS, 0, output, false, vec![]);
        return p;
    }
    // The copy comes first: in place it is a no-op on the exposed memory.
    let copied = p.copy(Region::input(0, n), output, vec![]);
    if w == 1 {
        return p;
    }
    let exposed = p.expose_slot(INPUTS, Region::input(0, n), vec![copied]);
    p.release(INPUTS, (w - 1) as u32, vec![exposed]);
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    // Readers share the root's memory bandwidth.
    block_read_cost(shape, elem_size, params, shape.world - 1, false, 1)
}
