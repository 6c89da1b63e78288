//! Ring reduce-scatter: `p - 1` rounds, each reducing one block into the
//! partial sum travelling around the ring. Bandwidth-optimal.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::ring;
use crate::algorithms::{Algorithm, CostParams};
use crate::builder::PlanBuilder;
use crate::partition::Blocks;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "ring",
    collective: Collective::ReduceScatter,
    generate,
    cost,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n) = (shape.world, shape.count);
    // Partial sums live in scratch, except our own block, which ends in Output.
    let work = b.scratch(w * n);
    let blocks = Blocks::from_regions(
        (0..w)
            .map(|q| {
                if q == rank {
                    Region::output(0, n)
                } else {
                    work.sub(q * n, n)
                }
            })
            .collect(),
    );
    for q in 0..w {
        b.copy(Region::input(q * n, n), blocks.get(q));
    }
    ring::reduce_scatter(&mut b, rank, &blocks, 0);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    (shape.world - 1) as f64 * (m.msg(shape.count) + m.reduce(shape.count))
}
