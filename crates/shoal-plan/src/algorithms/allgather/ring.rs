//! Ring allgather: `p - 1` rounds, each passing one block to the next rank.
//! Bandwidth-optimal; for large blocks. Takes per-rank counts (allgatherv).

use crate::algorithms::cost::Model;
use crate::algorithms::phases::ring;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::Blocks;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "ring",
    collective: Collective::Allgather,
    generate,
    cost,
    needs: Needs {
        counts: true,
        ..Needs::NOTHING
    },
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    // Block q holds rank q's input (per-rank counts: of its own length).
    let blocks = Blocks::from_regions(
        (0..shape.world)
            .map(|q| Region::output(shape.block_offset(q), shape.block(q)))
            .collect(),
    );
    b.copy(Region::input(0, shape.block(rank)), blocks.get(rank));
    ring::allgather(&mut b, rank, &blocks, 0);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let largest = (0..shape.world).map(|q| shape.block(q)).max().unwrap_or(0);
    (shape.world - 1) as f64 * m.msg(largest)
}
