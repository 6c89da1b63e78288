//! Recursive-doubling allreduce: in round `j` each survivor exchanges its
//! whole vector with the survivor `2^j` away and reduces. `log2 p` rounds of
//! `n` elements: latency-optimal, for small messages. Both partners compute
//! `a + b` and `b + a`, the same bits, so all ranks agree exactly.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::butterfly::rounds;
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::{Fold, FoldRole};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "recursive_doubling",
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
    let last = 1 + rounds(&fold);
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
            let incoming = b.scratch(n);
            for j in 0..rounds(&fold) {
                let peer = fold.rank_of(vrank ^ (1 << j));
                b.send(peer, 1 + j, data);
                b.recv(peer, 1 + j, incoming);
                b.reduce(incoming, data);
            }
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
    folding + rounds(&fold) as f64 * (m.msg(n) + m.reduce(n))
}
