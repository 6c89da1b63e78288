//! Pipelined-chain (PC) broadcast (Awan et al., "Optimized broadcast for deep
//! learning workloads on dense-GPU InfiniBand clusters"): ranks form a chain
//! starting at the root; the data moves in chunks and every rank forwards
//! chunk `i` while receiving chunk `i + 1`. Time approaches `n beta` for large
//! messages regardless of the world size: the choice for big broadcasts.
//! Also accepted under its short name `pc`.

use crate::algorithms::cost::Model;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::{from_vrank, vrank};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "pipelined_chain",
    collective: Collective::Broadcast,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, root) = (shape.world, shape.root);
    let data = Region::output(0, shape.count);
    let v = vrank(rank, root, w);
    if v == 0 {
        b.copy(Region::input(0, shape.count), data);
    } else {
        b.recv(from_vrank(v - 1, root, w), 0, data);
    }
    if v + 1 < w {
        // Piece k of the send waits only for piece k of the receive.
        b.send(from_vrank(v + 1, root, w), 0, data);
    }
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    Model::new(shape, elem_size, params).pipeline(shape.world - 1, shape.count)
}
