//! The barrier property: no rank may finish before every other rank has
//! started. In the happens-before graph (local deps, plus send -> receive
//! edges) some step of every rank must be reachable from some step of every
//! other rank; a rank completes only when all its steps have.

use super::error::{ErrorKind, VerifyError};
use super::matching::Matches;
use crate::plan::{Op, Plan};

pub fn check(plans: &[Plan], matches: &Matches) -> Result<(), VerifyError> {
    let succ = successors(plans, matches);
    for from in 0..plans.len() {
        let reached = reachable_ranks(plans, &succ, from);
        if let Some(rank) = (0..plans.len()).find(|&r| !reached[r]) {
            let kind = ErrorKind::BarrierLeak { unseen: from };
            return Err(VerifyError {
                rank: Some(rank),
                ..VerifyError::global(kind)
            });
        }
    }
    Ok(())
}

/// Happens-before successors of every (rank, step).
fn successors(plans: &[Plan], matches: &Matches) -> Vec<Vec<Vec<(usize, usize)>>> {
    let mut succ: Vec<Vec<Vec<(usize, usize)>>> = plans
        .iter()
        .map(|p| vec![Vec::new(); p.steps.len()])
        .collect();
    for (r, plan) in plans.iter().enumerate() {
        for (i, step) in plan.steps.iter().enumerate() {
            for &d in &step.deps {
                succ[r][d].push((r, i));
            }
            if let Op::Send { .. } = step.op {
                succ[r][i].push(matches.partner(r, i).expect("matched"));
            }
        }
    }
    succ
}

/// Ranks with a step that happens after some step of `from` (and `from` itself).
fn reachable_ranks(plans: &[Plan], succ: &[Vec<Vec<(usize, usize)>>], from: usize) -> Vec<bool> {
    let mut seen: Vec<Vec<bool>> = plans.iter().map(|p| vec![false; p.steps.len()]).collect();
    let mut stack: Vec<(usize, usize)> = (0..plans[from].steps.len()).map(|i| (from, i)).collect();
    let mut ranks = vec![false; plans.len()];
    ranks[from] = true;
    while let Some((r, i)) = stack.pop() {
        if std::mem::replace(&mut seen[r][i], true) {
            continue;
        }
        ranks[r] = true;
        stack.extend(succ[r][i].iter().copied());
    }
    ranks
}
