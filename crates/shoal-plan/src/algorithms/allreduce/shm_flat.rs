//! Shared-memory allreduce for small messages: every rank exposes its
//! Input and reduces all of them, read straight from the peers' memory in
//! rank order, into a scratch accumulator; once its peers are done reading
//! its Input it copies the result to Output (which may be the Input). One
//! flag round, no messages. Ranks of one host only.

use crate::algorithms::phases::shared::{
    cost as read_cost, reduce_in_rank_order, Exposure, INPUTS,
};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_flat",
    collective: Collective::Allreduce,
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
    if w == 1 {
        p.copy(input, Region::output(0, n), vec![]);
        return p;
    }
    p.scratch_len = n;
    let acc = Region::scratch(0, n);
    let exposed = p.expose_slot(INPUTS, input, vec![]);
    let reduced = reduce_in_rank_order(&mut p, w, 0, input, acc, vec![]);
    let released = p.release(INPUTS, (w - 1) as u32, vec![exposed]);
    p.copy(acc, Region::output(0, n), vec![reduced, released]);
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let bytes = (shape.count * elem_size) as f64;
    // The reads, then the copy out (after the peers' reads when in place).
    let via = Exposure::of_slot(bytes);
    let wait = if via == Exposure::Slot {
        0.0
    } else {
        params.alpha_local
    };
    // The copy out is a pass over local memory, as the slot's copy in.
    read_cost(params, shape.world - 1, bytes, true, via) + wait + bytes * params.gamma
}
