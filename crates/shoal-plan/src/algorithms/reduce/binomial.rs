//! Binomial-tree reduce: `log2 p` rounds of `n` elements, chunked so pieces
//! are reduced up the tree as they arrive.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::tree;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::log2_ceil;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "binomial",
    collective: Collective::Reduce,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let n = shape.count;
    // Only the root has an Output; inner nodes accumulate in scratch.
    let acc = if rank == shape.root {
        Region::output(0, n)
    } else {
        b.scratch(n)
    };
    b.copy(Region::input(0, n), acc);
    tree::reduce(&mut b, shape.root, acc, 0);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    log2_ceil(shape.world) as f64 * (m.msg(shape.count) + m.reduce(shape.count))
}
