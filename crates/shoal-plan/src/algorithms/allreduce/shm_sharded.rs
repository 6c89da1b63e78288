//! Shared-memory allreduce for large messages: every rank exposes its
//! Input; rank `r` reduces shard `r` of all of them, read straight from the
//! peers' memory (the executor reduces each cache-sized piece as it reads
//! it), into scratch and exposes it; then every rank copies the finished
//! shards straight from their owners into Output. Each byte is read once
//! per phase, with no intermediate messages. Ranks of one host only.

use crate::algorithms::phases::shared::{
    cost as read_cost, reduce_in_rank_order, shard, INPUTS, RESULTS,
};
use crate::algorithms::{Algorithm, CostParams};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "shm_sharded",
    collective: Collective::Allreduce,
    generate,
    cost,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let (w, n) = (shape.world, shape.count);
    let mut p = Plan::new(rank);
    if w == 1 {
        p.copy(Region::input(0, n), Region::output(0, n), vec![]);
        return p;
    }
    let (start, end) = shard(n, w, rank);
    p.scratch_len = end - start;
    let acc = Region::scratch(0, end - start);
    let exposed = p.expose(INPUTS, Region::input(0, n), vec![]);
    let own = Region::input(start, end - start);
    let reduced = reduce_in_rank_order(&mut p, w, start, own, acc, vec![]);
    let result = p.expose(RESULTS, acc, vec![reduced]);
    // Output may be the Input the peers still read: write it only after.
    let inputs_free = p.release(INPUTS, (w - 1) as u32, vec![exposed]);
    p.copy(
        acc,
        Region::output(start, end - start),
        vec![reduced, inputs_free],
    );
    for q in (0..w).filter(|&q| q != rank) {
        let (s, e) = shard(n, w, q);
        p.peer_read(
            q,
            RESULTS,
            0,
            Region::output(s, e - s),
            false,
            vec![inputs_free],
        );
    }
    p.release(RESULTS, (w - 1) as u32, vec![result]);
    p
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let w = shape.world;
    let shard_bytes = (shape.count * elem_size) as f64 / w as f64;
    read_cost(params, w - 1, shard_bytes, true) + read_cost(params, w - 1, shard_bytes, false)
}
