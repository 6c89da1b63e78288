//! Ring allgather: `p - 1` rounds, each passing one block to the next rank.
//! Bandwidth-optimal; for large blocks.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::ring;
use crate::algorithms::{Algorithm, CostParams};
use crate::builder::PlanBuilder;
use crate::partition::Blocks;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "ring",
    collective: Collective::Allgather,
    generate,
    cost,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let n = shape.count;
    let blocks = Blocks::uniform(Region::output(0, 0), shape.world, n);
    b.copy(Region::input(0, n), blocks.get(rank));
    ring::allgather(&mut b, rank, &blocks, 0);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    (shape.world - 1) as f64 * m.msg(shape.count)
}
