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
    let depth = log2_ceil(shape.world);
    let (hosts, _) = shape.layout();
    if hosts > 1 {
        // A parent's link carries every child's copy of every piece.
        Model::new(shape, elem_size, params).msg(shape.count) * depth as f64
    } else {
        // On one host each child reads its pieces from its parent's memory
        // (a chunk is at least SHOAL_SHM_CMA_BYTES by default), so siblings
        // copy at once and the pieces flow down the tree one hop apart.
        // Priced as `depth` copies of the whole buffer, the model passed
        // binomial over for scatter_allgather and pipelined_chain, which
        // measured 1.3-2x slower than it at 16 and 64 MiB on 8 and 16
        // ranks (16-core machine, issue 31; see the test in cost.rs).
        Model::local(shape, elem_size, params).pipeline(depth as usize, shape.count)
    }
}
