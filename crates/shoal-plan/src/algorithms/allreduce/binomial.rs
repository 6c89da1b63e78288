//! Binomial-tree allreduce: reduce to rank 0 along a binomial tree, then
//! broadcast back along it. `2 log2 p` rounds of `n` elements; simple and
//! pipelined by chunks, but moves more data than ring or Rabenseifner.
//! The result is computed once at rank 0, so every rank gets the same bits.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::tree;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::log2_ceil;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "binomial",
    collective: Collective::Allreduce,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let data = Region::output(0, shape.count);
    b.copy(Region::input(0, shape.count), data);
    tree::reduce(&mut b, 0, data, 0);
    tree::broadcast(&mut b, 0, data, log2_ceil(shape.world) as usize);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let levels = log2_ceil(shape.world) as f64;
    levels * (2.0 * m.msg(shape.count) + m.reduce(shape.count))
}
