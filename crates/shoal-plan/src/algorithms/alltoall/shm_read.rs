//! Shared-memory alltoall: every rank exposes its Input and copies the
//! block each peer holds for it straight from the peer's memory into its
//! Output. Ranks of one host only.

use crate::algorithms::phases::shared::{block_read_cost, INPUTS};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_read",
    collective: Collective::Alltoall,
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
    p.copy(
        Region::input(rank * n, n),
        Region::output(rank * n, n),
        vec![],
    );
    if w == 1 {
        return p;
    }
    let exposed = p.expose_slot(INPUTS, Region::input(0, w * n), vec![]);
    for q in (0..w).filter(|&q| q != rank) {
        p.peer_read(q, INPUTS, rank * n, Region::output(q * n, n), false, vec![]);
    }
    p.release(INPUTS, (w - 1) as u32, vec![exposed]);
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    block_read_cost(
        shape,
        elem_size,
        params,
        shape.world - 1,
        false,
        shape.world,
    )
}
