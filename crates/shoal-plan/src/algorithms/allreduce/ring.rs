//! Ring allreduce: a ring reduce-scatter then a ring allgather over `world`
//! blocks (Patarasuk and Yuan). Each rank sends `2 (p-1)/p n` elements, the
//! optimum, in `2 (p-1)` rounds: the choice for large messages.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::ring;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::Blocks;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "ring",
    collective: Collective::Allreduce,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let data = Region::output(0, shape.count);
    b.copy(Region::input(0, shape.count), data);
    let blocks = Blocks::even(data, shape.world);
    ring::reduce_scatter(&mut b, rank, &blocks, 0);
    ring::allgather(&mut b, rank, &blocks, shape.world);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let rounds = shape.world - 1;
    let block = shape.count.div_ceil(shape.world);
    rounds as f64 * (2.0 * m.msg(block) + m.reduce(block))
}
