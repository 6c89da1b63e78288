//! Ring reduce-scatter: `p - 1` rounds, each reducing one block into the
//! partial sum travelling around the ring. Bandwidth-optimal. Takes per-rank
//! counts (reduce_scatter with counts).

use crate::algorithms::cost::Model;
use crate::algorithms::phases::ring;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::Blocks;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "ring",
    collective: Collective::ReduceScatter,
    generate,
    cost,
    needs: Needs {
        counts: true,
        ..Needs::NOTHING
    },
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let w = shape.world;
    // Partial sums live in scratch, except our own block, which ends in Output.
    let work = b.scratch(shape.block_offset(w));
    let blocks = Blocks::from_regions(
        (0..w)
            .map(|q| {
                let (offset, len) = (shape.block_offset(q), shape.block(q));
                if q == rank {
                    Region::output(0, len)
                } else {
                    work.sub(offset, len)
                }
            })
            .collect(),
    );
    for q in 0..w {
        let input = Region::input(shape.block_offset(q), shape.block(q));
        b.copy(input, blocks.get(q));
    }
    ring::reduce_scatter(&mut b, rank, &blocks, 0);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let largest = (0..shape.world).map(|q| shape.block(q)).max().unwrap_or(0);
    (shape.world - 1) as f64 * (m.msg(largest) + m.reduce(largest))
}
