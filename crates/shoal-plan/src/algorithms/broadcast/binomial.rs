//! Binomial-tree broadcast: `log2 p` rounds of `n` elements. Chunked, so
//! pieces flow down the tree while later pieces are still leaving the root.
//! For small messages.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::tree;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::log2_ceil;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "binomial",
    collective: Collective::Broadcast,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let data = Region::output(0, shape.count);
    if rank == shape.root {
        b.copy(Region::input(0, shape.count), data);
    }
    tree::broadcast(&mut b, shape.root, data, 0);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    log2_ceil(shape.world) as f64 * m.msg(shape.count)
}
