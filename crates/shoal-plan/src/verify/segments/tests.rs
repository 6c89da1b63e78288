//! The model decides as the call itself does, and names the same element:
//! every built-in algorithm's plans, each broken at one step in turn, give
//! the same result through the model as element by element.

use super::Model;
use crate::algorithms::registry;
use crate::plan::{CallShape, Op, Plan, Region};
use crate::verify::error::VerifyError;
use crate::verify::{check_values, matching, races, shared};

fn modelled(shape: &CallShape, plans: &[Plan]) -> Result<(), VerifyError> {
    let matches = matching::match_messages(plans)?;
    let model = Model::of(shape, plans, &matches)?;
    check_values(&model.shape, &model.plans).map_err(|e| model.explain(e, plans))
}

/// Whether the checks before the model pass, so both see the plans.
fn well_formed(shape: &CallShape, plans: &[Plan]) -> bool {
    let Ok(matches) = matching::match_messages(plans) else {
        return false;
    };
    crate::verify::structure::check(shape, plans).is_ok()
        && plans
            .iter()
            .all(|p| races::check(shape, p).is_ok() && shared::check(shape, p, &matches).is_ok())
}

/// Step `i` of `plan` broken in one of a few ways that keep it well
/// formed more often than not: a reduction that overwrites, a copy
/// that accumulates, a transfer one element short or shifted by one.
fn mutate(plan: &mut Plan, i: usize) {
    let shorter = |r: Region| Region::new(r.buf, r.offset, r.len.saturating_sub(1));
    let shifted = |r: Region| Region::new(r.buf, r.offset + 1, r.len);
    let op = &mut plan.steps[i].op;
    *op = match (i % 4, op.clone()) {
        (0, Op::RecvReduce { peer, tag, dst }) => Op::Recv { peer, tag, dst },
        (0, Op::Reduce { src, dst }) => Op::Copy { src, dst },
        (1, Op::Copy { src, dst }) => Op::Reduce { src, dst },
        (2, Op::Copy { src, dst }) => Op::Copy {
            src: shorter(src),
            dst: shorter(dst),
        },
        (3, Op::Copy { src, dst }) => Op::Copy {
            src: shifted(src),
            dst,
        },
        (3, Op::Send { peer, tag, src }) => Op::Send {
            peer,
            tag,
            src: shifted(src),
        },
        (_, same) => same,
    };
}

/// Shapes of every built-in algorithm: counts 0 to 13 on 1 to 5 ranks,
/// and uneven per-rank counts where an algorithm takes them.
fn shapes() -> Vec<(&'static crate::Algorithm, CallShape)> {
    let mut out = Vec::new();
    for alg in registry() {
        for world in 1..=5 {
            for count in [0, 1, 5, 13] {
                let shape = CallShape {
                    root: world / 2,
                    ranks_per_host: 2,
                    ..CallShape::new(alg.collective, world, count, 3)
                };
                out.push((alg, shape));
            }
            let shape = CallShape::new(alg.collective, world, 0, 3);
            if let Some(len) = shape.counts_len() {
                let counts = (0..len).map(|i| [0, 1, 5, 2, 13][(i * 3 + world) % 5]);
                let counts = Some(counts.collect());
                out.push((alg, CallShape { counts, ..shape }));
            }
        }
    }
    out.retain(|(alg, shape)| alg.refuses(shape).is_none());
    out
}

#[test]
fn the_model_decides_as_the_call_does_and_names_the_same_element() {
    let (mut compared, mut wrong) = (0, 0);
    for (alg, shape) in shapes() {
        let world = shape.world;
        let plans: Vec<Plan> = (0..world).map(|r| (alg.generate)(&shape, r)).collect();
        let steps = |r: usize| (0..plans[r].steps.len()).map(move |i| (r, i));
        for (rank, i) in (0..world).flat_map(steps) {
            let mut broken = plans.clone();
            mutate(&mut broken[rank], i);
            if broken == plans || !well_formed(&shape, &broken) {
                continue;
            }
            let expected = check_values(&shape, &broken); // element by element
            let what = format!(
                "{}/{} {shape:?} rank {rank} step {i}",
                alg.collective, alg.name
            );
            assert_eq!(modelled(&shape, &broken), expected, "{what}");
            compared += 1;
            wrong += usize::from(expected.is_err());
        }
    }
    assert!(
        compared > 2000 && wrong > 2000,
        "{compared} compared, {wrong} wrong"
    );
}
