//! Linear gather: every rank sends its block straight to the root.

use crate::algorithms::cost::Model;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "linear",
    collective: Collective::Gather,
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
    b.copy(input, Region::output(root * n, n));
    for q in (0..w).filter(|&q| q != root) {
        b.recv(q, 0, Region::output(q * n, n));
    }
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    // Posted at once: one latency, then the root's link serialises the bytes.
    m.fan_latency(shape.world - 1, shape.count) + m.transfer((shape.world - 1) * shape.count)
}
