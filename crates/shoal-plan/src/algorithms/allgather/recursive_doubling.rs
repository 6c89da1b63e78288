//! Recursive-doubling allgather: in round `j` survivors swap everything they
//! hold with the survivor `2^j` away. `log2 p` rounds; for small blocks.
//! Non-powers of two fold the extra ranks in and out.

use crate::algorithms::cost::Model;
use crate::algorithms::phases::butterfly::{self, rounds};
use crate::algorithms::{Algorithm, CostParams, Needs};
use crate::builder::PlanBuilder;
use crate::partition::{log2_ceil, Blocks, Fold, FoldRole};
use crate::plan::{CallShape, Collective, Plan, Region};

pub const ALGORITHM: Algorithm = Algorithm {
    name: "recursive_doubling",
    collective: Collective::Allgather,
    generate,
    cost,
    needs: Needs::NOTHING,
};

fn generate(shape: &CallShape, rank: usize) -> Plan {
    let mut b = PlanBuilder::new(shape, rank);
    let (w, n) = (shape.world, shape.count);
    let input = Region::input(0, n);
    let all = Region::output(0, w * n);
    let blocks = Blocks::uniform(all, w, n);
    let fold = Fold::new(w);
    let last = 1 + rounds(&fold);
    match fold.role(rank) {
        FoldRole::Helper { survivor } => {
            b.send(survivor, 0, input);
            b.recv(survivor, last, all);
        }
        FoldRole::Survivor { vrank, helper } => {
            b.copy(input, blocks.get(rank));
            if let Some(h) = helper {
                b.recv(h, 0, blocks.get(h));
            }
            butterfly::doubling_allgather(&mut b, &fold, vrank, &blocks, 1);
            if let Some(h) = helper {
                b.send(h, last, all);
            }
        }
    }
    b.finish()
}

fn cost(shape: &CallShape, elem_size: usize, params: &CostParams) -> f64 {
    let m = Model::new(shape, elem_size, params);
    let (w, n) = (shape.world, shape.count);
    let fold = Fold::new(w);
    let folding = if fold.rem > 0 {
        m.msg(n) + m.msg(w * n)
    } else {
        0.0
    };
    folding + log2_ceil(fold.pow2) as f64 * params.alpha + m.transfer((w - 1) * n)
}
