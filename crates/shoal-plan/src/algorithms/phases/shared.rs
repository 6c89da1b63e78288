//! Building blocks of the shared-memory algorithms (`shm_*`): ranks of one
//! host expose their buffers and read (or read-reduce) the peers' regions in
//! place instead of exchanging messages. See `Op::Expose` and its kin.

use crate::plan::{Plan, Region};

/// Flag under which every rank exposes its Input.
pub const INPUTS: u32 = 0;
/// Flag under which ranks expose finished results (second phases).
pub const RESULTS: u32 = 1;

/// Reduces, in rank order `((x0 op x1) op x2) ...` (so every rank that
/// computes an element combines it alike), the region at `offset` of every
/// rank's `INPUTS` exposure into `acc`; `own` is this rank's share of it.
/// Returns the last step.
pub fn reduce_in_rank_order(
    p: &mut Plan,
    world: usize,
    offset: usize,
    own: Region,
    acc: Region,
    deps: Vec<usize>,
) -> usize {
    let me = p.rank;
    let mut last = if me == 0 {
        p.copy(own, acc, deps)
    } else {
        p.peer_read(0, INPUTS, offset, acc, false, deps)
    };
    for q in 1..world {
        last = if q == me {
            p.reduce(own, acc, vec![last])
        } else {
            p.peer_read(q, INPUTS, offset, acc, true, vec![last])
        };
    }
    last
}

/// `[start, end)` of shard `q` when `n` elements are split over `world` ranks.
pub fn shard(n: usize, world: usize, q: usize) -> (usize, usize) {
    (q * n / world, (q + 1) * n / world)
}

/// Cost of reading `bytes` from each of `peers` ranks of this host and
/// reducing them (`reduce`), after one flag round trip (the owner's Release
/// waits for the readers' counts: that round trip is the same `alpha_local`
/// and overlaps the reads, so it is not counted twice).
pub fn cost(params: &crate::algorithms::CostParams, peers: usize, bytes: f64, reduce: bool) -> f64 {
    let per_byte = params.beta_local + if reduce { params.gamma } else { 0.0 };
    params.alpha_local + peers as f64 * bytes * per_byte
}
