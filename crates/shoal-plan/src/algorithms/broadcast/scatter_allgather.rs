//! Scatter-allgather broadcast (van de Geijn): a binomial scatter of `p`
//! blocks from the root, then a ring allgather. Moves about `2 n` elements
//! per rank instead of `n log2 p`: for large messages on many ranks.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::{ring, tree};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::{log2_ceil, vrank, Blocks};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "scatter_allgather",
    collective: Collective::Broadcast,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, root) = (shape.world, shape.root);
    let data = Region::output(0, shape.count);
    if rank == root {
        b.copy(Region::input(0, shape.count), data);
    }
    // Blocks are indexed by vrank so that subtrees are contiguous spans.
    let blocks = Blocks::even(data, w);
    tree::scatter(&mut b, root, &blocks, 0);
    ring::allgather(&mut b, vrank(rank, root, w), &blocks, log2_ceil(w) as usize);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let w = shape.world;
    let block = shape.count.div_ceil(w);
    let scatter = log2_ceil(w) as f64 * params.alpha + m.transfer(shape.count - shape.count / w);
    scatter + (w - 1) as f64 * m.msg(block)
}
