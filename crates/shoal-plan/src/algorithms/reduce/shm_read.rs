//! Shared-memory reduce: every rank but the root exposes its Input, and the
//! root reduces all of them, read straight from the peers' memory in rank
//! order, into scratch, then copies the result to its Output. Ranks of one host only.

use crate::algorithms::phases::shared::{block_read_cost, reduce_in_rank_order, INPUTS};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_read",
    collective: Collective::Reduce,
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
        // Output may be the Input: accumulate aside, copy at the end.
        p.scratch_len = n;
        let acc = Region::scratch(0, n);
        let reduced = reduce_in_rank_order(&mut p, w, 0, input, acc, vec![]);
        p.copy(acc, Region::output(0, n), vec![reduced]);
    } else {
        let exposed = p.expose_slot(INPUTS, input, vec![]);
        p.release(INPUTS, 1, vec![exposed]);
    }
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    block_read_cost(shape, elem_size, params, shape.world - 1, true, 1)
}
