//! Recursive-halving reduce-scatter: in round `j` survivors send the half of
//! their range that the partner keeps and reduce the half they keep.
//! `log2 p` rounds moving `(p-1)/p` of the vector; non-powers of two fold
//! the extra ranks in and send them their block at the end.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::butterfly::{self, rounds};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::{Blocks, Fold, FoldRole};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "halving",
    collective: Collective::ReduceScatter,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n) = (shape.world, shape.count);
    let input = Region::input(0, w * n);
    let out = Region::output(0, n);
    let fold = Fold::new(w);
    let last = 1 + rounds(&fold);
    match fold.role(rank) {
        FoldRole::Helper { survivor } => {
            b.send(survivor, 0, input);
            b.recv(survivor, last, out);
        }
        FoldRole::Survivor { vrank, helper } => {
            let work = b.scratch(w * n);
            b.copy(input, work);
            if let Some(h) = helper {
                b.recv_reduce(h, 0, work);
            }
            let blocks = Blocks::uniform(work, w, n);
            butterfly::halving_reduce_scatter(&mut b, &fold, vrank, &blocks, 1);
            if let Some(h) = helper {
                b.send(h, last, blocks.get(h));
            }
            b.copy(blocks.get(rank), out);
        }
    }
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let (w, n) = (shape.world, shape.count);
    let fold = Fold::new(w);
    let folding = if fold.rem > 0 {
        m.msg(w * n) + m.reduce(w * n) + m.msg(n)
    } else {
        0.0
    };
    let halves: f64 = (1..=rounds(&fold))
        .map(|j| {
            let part = (w * n) >> j;
            m.msg(part) + m.reduce(part)
        })
        .sum();
    folding + halves
}
