//! Binomial-tree scatter: the root hands each child its subtree's blocks in
//! one message, and inner ranks pass them on. `log2 p` latencies; for small
//! blocks.

use crate::algorithms::cost::Model;
use crate::algorithms::gather::binomial::subtree_blocks;
use crate::algorithms::phases::tree::{self, subtree_of};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::log2_ceil;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "binomial",
    collective: Collective::Scatter,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n, root) = (shape.world, shape.count, shape.root);
    let blocks = subtree_blocks(&mut b, rank, root, w, n);
    if rank == root {
        // Rank order to vrank order: ranks root..w are vranks 0..w-root.
        b.copy(
            Region::input(root * n, (w - root) * n),
            blocks.span(0..w - root),
        );
        b.copy(Region::input(0, root * n), blocks.span(w - root..w));
    }
    tree::scatter(&mut b, root, &blocks, 0);
    let me = subtree_of(rank, root, w).start;
    b.copy(blocks.get(me), Region::output(0, n));
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    log2_ceil(shape.world) as f64 * params.alpha + m.transfer((shape.world - 1) * shape.count)
}
