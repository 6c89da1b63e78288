//! Hierarchical allreduce (NetReduce's "parallel all-reduce", UCC's
//! hierarchical allreduce): a ring reduce-scatter among the ranks of each
//! host, then every local rank `j` runs a ring allreduce of shard `j` with
//! rank `j` of every other host (all shards in parallel, so every rank of a
//! host drives the network at once), then a ring allgather inside each host.
//! The network carries `2 (h-1)/h n` per host instead of the flat ring's
//! traffic through every rank; shared memory carries the rest.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::ring::{self, Ring};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::Blocks;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "hierarchical",
    collective: Collective::Allreduce,
    generate,
    cost,
    needs: Needs {
        host_layout: true,
        ..Needs::NOTHING
    },
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (hosts, local) = shape.layout();
    let (host, j) = (rank / local, rank % local);
    let data = Region::output(0, shape.count);
    b.copy(Region::input(0, shape.count), data);

    let host_ring: Vec<usize> = (0..local).map(|i| host * local + i).collect();
    let peer_ring: Vec<usize> = (0..hosts).map(|g| g * local + j).collect();
    let (inside, across) = (Ring::of(&host_ring, j), Ring::of(&peer_ring, host));
    let shards = Blocks::even(data, local);
    let pieces = Blocks::even(shards.get(j), hosts);

    ring::reduce_scatter_in(&mut b, &inside, j, &shards, 0);
    ring::reduce_scatter_in(&mut b, &across, host, &pieces, local);
    ring::allgather_in(&mut b, &across, host, &pieces, local + hosts);
    ring::allgather_in(&mut b, &inside, j, &shards, local + 2 * hosts);
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let (hosts, local) = shape.layout();
    let shard = shape.count.div_ceil(local);
    let piece = shard.div_ceil(hosts);
    let inside = Model::local(shape, elem_size, params);
    let across = Model::new(shape, elem_size, params);
    // The local ranks share their host's link during the inter-host phase.
    let link_share = across.transfer(piece) * (local - 1) as f64;
    let intra = (local - 1) as f64 * (2.0 * inside.msg(shard) + inside.reduce(shard));
    let inter =
        (hosts - 1) as f64 * (2.0 * (across.msg(piece) + link_share) + across.reduce(piece));
    intra + inter
}
