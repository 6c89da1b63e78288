//! Linear scatter: the root sends each rank its block directly.

use crate::algorithms::cost::Model;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "linear",
    collective: Collective::Scatter,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n, root) = (shape.world, shape.count, shape.root);
    let out = Region::output(0, n);
    if rank != root {
        b.recv(root, 0, out);
        return b.finish();
    }
    for s in 1..w {
        let q = (root + s) % w;
        b.send(q, 0, Region::input(q * n, n));
    }
    b.copy(Region::input(root * n, n), out);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    m.fan_latency(shape.world - 1, shape.count) + m.transfer((shape.world - 1) * shape.count)
}
