//! Binomial-tree gather: each rank collects its subtree's blocks (a
//! contiguous vrank range) in scratch and forwards them to its parent in one
//! message. `log2 p` latencies instead of `p - 1`; for small blocks.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::tree::{self, subtree_of};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::{log2_ceil, Blocks};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "binomial",
    collective: Collective::Gather,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n, root) = (shape.world, shape.count, shape.root);
    let blocks = subtree_blocks(&mut b, rank, root, w, n);
    let me = subtree_of(rank, root, w).start;
    b.copy(Region::input(0, n), blocks.get(me));
    tree::gather(&mut b, root, &blocks, 0);
    if rank == root {
        unrotate(&mut b, &blocks, root, n);
    }
    b.finish()
}

/// Scratch blocks, indexed by vrank, for the subtree this rank collects;
/// blocks outside it are empty and never used.
pub fn subtree_blocks(b: &mut PlanBuilder, rank: usize, root: usize, w: usize, n: usize) -> Blocks {
    let sub = subtree_of(rank, root, w);
    let area = b.scratch(sub.len() * n);
    Blocks::from_regions(
        (0..w)
            .map(|v| {
                if sub.contains(&v) {
                    area.sub((v - sub.start) * n, n)
                } else {
                    Region::scratch(0, 0)
                }
            })
            .collect(),
    )
}

/// Copies vrank-ordered blocks into rank order: vranks `0..w-root` are ranks
/// `root..w`, the rest wrap to `0..root`.
fn unrotate(b: &mut PlanBuilder, blocks: &Blocks, root: usize, n: usize) {
    let w = blocks.len();
    b.copy(
        blocks.span(0..w - root),
        Region::output(root * n, (w - root) * n),
    );
    b.copy(blocks.span(w - root..w), Region::output(0, root * n));
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    log2_ceil(shape.world) as f64 * params.alpha + m.transfer((shape.world - 1) * shape.count)
}
