//! Direct (one-shot) allreduce: every rank sends its whole input to every
//! other rank and reduces all contributions itself. One message latency, for
//! tiny messages (especially over shared memory). Contributions are reduced
//! in rank order `((x0 + x1) + x2) + ...` on every rank, so all ranks agree
//! bit for bit.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::linear::reduce_in_rank_order;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "direct",
    collective: Collective::Allreduce,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let n = shape.count;
    let input = Region::input(0, n);
    gather_everywhere(&mut b, input);
    b.finish()
}

/// Collects every rank's `input` into scratch slots and reduces them, in
/// rank order, into Output. Own input is copied to a slot first because
/// Output may be the same memory as Input.
fn gather_everywhere(b: &mut PlanBuilder, input: Region) {
    let (w, me, n) = (b.world(), b.rank(), input.len);
    let slots = b.scratch(w * n);
    let slot = |q: usize| slots.sub(q * n, n);
    b.copy(input, slot(me));
    for s in 1..w {
        b.send((me + s) % w, 0, input);
    }
    for s in 1..w {
        let q = (me + w - s) % w;
        b.recv(q, 0, slot(q));
    }
    reduce_in_rank_order(b, &slot, w, Region::output(0, n));
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let others = (shape.world - 1) as f64;
    // All sends are posted at once: their latencies overlap but for the sender's
    // own work per message, then the link serialises the bytes.
    m.fan_latency(shape.world - 1, shape.count)
        + others * (m.transfer(shape.count) + m.reduce(shape.count))
}
