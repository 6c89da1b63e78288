//! Rabenseifner's allreduce: recursive-halving reduce-scatter, then
//! recursive-doubling allgather. `2 log2 p` rounds moving `2 (p-1)/p n`
//! elements: near-optimal in both latency and bandwidth for mid-to-large
//! messages. Each block is fully reduced on one rank, then copied, so all
//! ranks hold the same bits.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::butterfly::{self, rounds};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::{Blocks, Fold, FoldRole};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "rabenseifner",
    collective: Collective::Allreduce,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let n = shape.count;
    let (input, data) = (Region::input(0, n), Region::output(0, n));
    let fold = Fold::new(shape.world);
    let k = rounds(&fold);
    let last = 1 + 2 * k;
    match fold.role(rank) {
        FoldRole::Helper { survivor } => {
            b.send(survivor, 0, input);
            b.recv(survivor, last, data);
        }
        FoldRole::Survivor { vrank, helper } => {
            b.copy(input, data);
            if let Some(h) = helper {
                b.recv_reduce(h, 0, data);
            }
            let blocks = Blocks::even(data, shape.world);
            butterfly::halving_reduce_scatter(&mut b, &fold, vrank, &blocks, 1);
            butterfly::doubling_allgather(&mut b, &fold, vrank, &blocks, 1 + k);
            if let Some(h) = helper {
                b.send(h, last, data);
            }
        }
    }
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let n = shape.count;
    let fold = Fold::new(shape.world);
    let folding = if fold.rem > 0 {
        2.0 * m.msg(n) + m.reduce(n)
    } else {
        0.0
    };
    let halves: f64 = (1..=rounds(&fold))
        .map(|j| {
            let part = n >> j;
            2.0 * m.msg(part) + m.reduce(part)
        })
        .sum();
    folding + halves
}
