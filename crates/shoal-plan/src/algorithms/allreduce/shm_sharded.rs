//! Shared-memory allreduce for large messages. Rank `r` owns shard `r` of
//! the vector: it exposes each other shard `q` of its Input under flag `q`,
//! reduces its own shard in place in Output, reading shard `r` straight from
//! every peer's memory (the executor reduces each cache-sized piece as it
//! reads it), then exposes the finished shard under flag `r`; every rank
//! then copies the finished shards straight from their owners into Output.
//! Each byte crosses once per phase, with no intermediate buffer. Shard `r`
//! is computed by rank `r` alone and copied by the others, so all ranks hold
//! the same bits. Ranks of one host only.

use crate::algorithms::phases::shared::{cost as read_cost, shard, Exposure};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_sharded",
    collective: Collective::Allreduce,
    generate,
    cost,
    needs: Needs {
        peers_memory: true,
        ..Needs::NOTHING
    },
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let (w, n) = (shape.world, shape.count);
    let mut p = Plan::new(rank);
    let shard_of = |q: usize| {
        let (s, e) = shard(n, w, q);
        (s, e - s)
    };
    let (start, len) = shard_of(rank);
    // Flag q: shard q of the Input for rank q to reduce (q != rank), then
    // this rank's finished shard (q == rank).
    let mut lent = vec![usize::MAX; w];
    for q in (0..w).filter(|&q| q != rank) {
        let (s, l) = shard_of(q);
        lent[q] = p.expose(q as u32, Region::input(s, l), vec![]);
    }
    let mine = Region::output(start, len);
    // In place this copy is a no-op; the peers never read this shard of ours.
    let mut last = p.copy(Region::input(start, len), mine, vec![]);
    for q in (0..w).filter(|&q| q != rank) {
        last = p.peer_read(q, rank as u32, 0, mine, true, vec![last]);
    }
    if w == 1 {
        return p;
    }
    let result = p.expose(rank as u32, mine, vec![last]);
    for q in (0..w).filter(|&q| q != rank) {
        // Output shard q is Input shard q in place: overwrite it only once
        // rank q has read it.
        let (s, l) = shard_of(q);
        let free = p.release(q as u32, 1, vec![lent[q]]);
        p.peer_read(q, q as u32, 0, Region::output(s, l), false, vec![free]);
    }
    p.release(rank as u32, (w - 1) as u32, vec![result]);
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let w = shape.world;
    let shard_bytes = (shape.count * elem_size) as f64 / w as f64;
    let via = Exposure::InPlace;
    read_cost(params, w - 1, shard_bytes, true, via)
        + read_cost(params, w - 1, shard_bytes, false, via)
}
