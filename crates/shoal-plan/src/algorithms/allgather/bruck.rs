//! Bruck's allgather: `ceil(log2 p)` rounds for any `p`, no fold. In round
//! `k` each rank sends the first `min(2^k, p - 2^k)` blocks it holds to
//! `rank - 2^k` and appends those of `rank + 2^k`; blocks accumulate in
//! scratch in rotated order and are rotated into Output at the end.

use crate::algorithms::cost::Model;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::log2_ceil;
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "bruck",
    collective: Collective::Allgather,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n) = (shape.world, shape.count);
    // rotated.sub(i * n, n) holds the block of rank (rank + i) % w.
    let rotated = b.scratch(w * n);
    b.copy(Region::input(0, n), rotated.sub(0, n));
    let mut d = 1;
    for round in 0..log2_ceil(w) as usize {
        let blocks = d.min(w - d);
        b.send((rank + w - d) % w, round, rotated.sub(0, blocks * n));
        b.recv((rank + d) % w, round, rotated.sub(d * n, blocks * n));
        d *= 2;
    }
    let wrap = w - rank;
    b.copy(rotated.sub(0, wrap * n), Region::output(rank * n, wrap * n));
    b.copy(rotated.sub(wrap * n, rank * n), Region::output(0, rank * n));
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let (w, n) = (shape.world, shape.count);
    let rounds: f64 = (0..log2_ceil(w))
        .map(|k| m.latency((1usize << k).min(w - (1 << k)) * n))
        .sum();
    rounds + m.transfer((w - 1) * n)
}
