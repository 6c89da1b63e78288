//! Direct reduce: every rank sends its input straight to the root, which
//! reduces the contributions in rank order. One latency; for tiny messages.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::linear::reduce_in_rank_order;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "direct",
    collective: Collective::Reduce,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n, root) = (shape.world, shape.count, shape.root);
    let input = Region::input(0, n);
    if rank != root {
        b.send(root, 0, input);
        return b.finish();
    }
    // The root's own input goes to a slot too: Output may alias Input.
    let slots = b.scratch(w * n);
    let slot = |q: usize| slots.sub(q * n, n);
    b.copy(input, slot(root));
    for q in (0..w).filter(|&q| q != root) {
        b.recv(q, 0, slot(q));
    }
    reduce_in_rank_order(&mut b, &slot, w, Region::output(0, n));
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let others = (shape.world - 1) as f64;
    m.fan_latency(shape.world - 1, shape.count)
        + others * (m.transfer(shape.count) + m.reduce(shape.count))
}
