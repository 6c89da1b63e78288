//! Dissemination barrier (Hensgen, Finkel and Manber): in round `k` rank `r`
//! signals `r + 2^k` and waits for `r - 2^k`. After `ceil(log2 p)` rounds
//! every rank has heard, through some chain, from every other rank.

use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::log2_ceil;
use crate::plan::{CallShape, Collective, Op, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "dissemination",
    collective: Collective::Barrier,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let w = shape.world;
    let empty = Region::output(0, 0);
    // Empty messages carry no data, so the ordering is spelled out by hand.
    let mut heard: Vec<usize> = Vec::new();
    for k in 0..log2_ceil(w) as usize {
        let d = 1 << k;
        let tag = k as u32;
        b.push(
            Op::Send {
                peer: (rank + d) % w,
                tag,
                src: empty,
            },
            &heard,
        );
        heard = vec![b.push(
            Op::Recv {
                peer: (rank + w - d) % w,
                tag,
                dst: empty,
            },
            &heard,
        )];
    }
    b.finish()
}

fn cost(shape: &CallShape, _elem_size: usize, params: &CostParams) -> f64 {
    log2_ceil(shape.world) as f64 * params.alpha
}
