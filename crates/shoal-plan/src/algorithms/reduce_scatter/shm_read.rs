//! Shared-memory reduce_scatter: every rank exposes its Input and reduces
//! block `r` of all of them, read straight from the peers' memory in rank
//! order, into its Output. Ranks of one host only.

use crate::algorithms::phases::shared::{block_read_cost, reduce_in_rank_order, INPUTS};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_read",
    collective: Collective::ReduceScatter,
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
    let own = Region::input(rank * n, n);
    let output = Region::output(0, n);
    if w == 1 {
        p.copy(own, output, vec![]);
        return p;
    }
    let exposed = p.expose_slot(INPUTS, Region::input(0, w * n), vec![]);
    reduce_in_rank_order(&mut p, w, rank * n, own, output, vec![]);
    p.release(INPUTS, (w - 1) as u32, vec![exposed]);
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    block_read_cost(shape, elem_size, params, shape.world - 1, true, shape.world)
}
