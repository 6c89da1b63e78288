//! Topology-aware pipelined-chain (TA-PC) broadcast (paper 002; short name
//! `ta_pc`): like `pipelined_chain`,
//! but the chain follows the machine: it covers the root's host first
//! (through shared memory), then enters every other host exactly once over
//! the network and continues through that host's ranks. Every network link
//! then carries the data once, and chunking keeps all links busy at once.

use crate::algorithms::cost::Model;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "topology_aware_pipelined_chain",
    collective: Collective::Broadcast,
    generate,
    cost,
    needs: Needs {
        host_layout: true,
        ..Needs::NOTHING
    },
};

/// The chain: the root, the rest of the root's host, then each following
/// host (wrapping around) with its ranks in order.
fn chain(shape: &CallShape) -> Vec<usize> {
    let (hosts, local) = shape.layout();
    let root = shape.root;
    let (root_host, root_j) = (root / local, root % local);
    (0..hosts)
        .map(|k| (root_host + k) % hosts)
        .flat_map(|h| {
            let first = if h == root_host { root_j } else { 0 };
            (0..local).map(move |i| h * local + (first + i) % local)
        })
        .collect()
}

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let order = chain(shape);
    let v = order
        .iter()
        .position(|&r| r == rank)
        .expect("every rank is on the chain");
    let data = Region::output(0, shape.count);
    if v == 0 {
        b.copy(Region::input(0, shape.count), data);
    } else {
        b.recv(order[v - 1], 0, data);
    }
    if v + 1 < order.len() {
        // Piece k of the send waits only for piece k of the receive.
        b.send(order[v + 1], 0, data);
    }
    b.finish()
}

/// A pipeline runs at the pace of its slowest hop: a network hop when the
/// chain leaves a host, else shared memory.
fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let (hosts, _) = shape.layout();
    let model = if hosts > 1 {
        Model::new(shape, elem_size, params)
    } else {
        Model::local(shape, elem_size, params)
    };
    model.pipeline(shape.world - 1, shape.count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(world: usize, local: usize, root: usize) -> CallShape {
        CallShape {
            collective: Collective::Broadcast,
            world,
            count: 10,
            root,
            chunk: 4,
            ranks_per_host: local,
            counts: None,
        }
    }

    #[test]
    fn chain_enters_each_host_once() {
        assert_eq!(chain(&shape(6, 2, 3)), vec![3, 2, 4, 5, 0, 1]);
        assert_eq!(chain(&shape(4, 1, 2)), vec![2, 3, 0, 1]);
        assert_eq!(chain(&shape(5, 2, 1)), vec![1, 2, 3, 4, 0]); // irregular: flat
    }
}
