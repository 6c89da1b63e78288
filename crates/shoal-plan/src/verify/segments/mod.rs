//! Merges elements that the plans always move together, so the verifier's
//! memory grows with how finely the plans cut the buffers, not with the count.
//!
//! Symbolic execution holds a value per element: a two-rank call of 10M
//! elements took 2.7 GB. But a ring allreduce of 10M elements moves a few
//! dozen runs of elements, each as a whole, and element `j` of a run fares as
//! the run's first element does, shifted by `j`. So every buffer is cut into
//! *segments*, and each segment is one element of a smaller *model* of the
//! call, on which the checks that hold a value per element run. The cuts:
//!
//! - every region a step names starts and ends at one;
//! - a cut inside a region that a step copies, reduces, sends or lends to a
//!   peer cuts the other end at the same distance from its start;
//! - blocks that the buffer contract ties together are cut alike (a *space*):
//!   without per-rank counts every block of the call (allreduce: each Input
//!   and Output; allgather: each Input and each block of each Output), so the
//!   model has a count; with counts, block `q` wherever it appears.
//!
//! Cuts spread until no cut adds another. Every step then moves whole
//! segments, and the elements of a segment are never told apart, so the model
//! passes exactly when the call does, and its errors translate back to the
//! call's elements ([`Model::explain`]). Plans cut into more than
//! [`max_modeled`] segments are refused rather than modelled.

mod cuts;
mod layout;
mod map;
#[cfg(test)]
mod tests;

use super::error::{ErrorKind, Problem, Stuck, VerifyError};
use super::matching::Matches;
use crate::plan::{Buf, CallShape, Plan};
use layout::Layout;
use map::Map;

/// The most segments the verifier models, over all ranks and buffers
/// together, in groups of up to 16 ranks (1 Mi); larger groups get
/// proportionally fewer ([`max_modeled`]), since an element holds up to a
/// contribution per rank.
pub const MAX_MODELED: usize = 1 << 20;

/// The most segments the verifier models for a group of `world` ranks.
pub fn max_modeled(world: usize) -> usize {
    MAX_MODELED * 16 / world.max(16)
}

/// The call with one element per segment, and the way back.
pub struct Model {
    pub shape: CallShape,
    pub plans: Vec<Plan>,
    map: Map,
}

impl Model {
    /// The model of `plans`, which passed the structure and matching checks.
    pub fn of(shape: &CallShape, plans: &[Plan], matches: &Matches) -> Result<Model, VerifyError> {
        let limit = max_modeled(shape.world);
        let too_many = || VerifyError::global(ErrorKind::TooManySegments { limit });
        let layout = Layout::of(shape, plans, limit).ok_or_else(too_many)?;
        let cuts = cuts::spread(&layout, plans, matches, limit).ok_or_else(too_many)?;
        let map = Map::new(layout, cuts, limit).ok_or_else(too_many)?;
        let plans = plans.iter().map(|p| map.plan(p, matches)).collect();
        Ok(Model {
            shape: map.shape(shape),
            plans,
            map,
        })
    }

    /// `e`, found on the model, in terms of the call's elements and steps:
    /// a wrong segment names its first element, which is wrong the same way
    /// (and the first wrong one, since the segments before it are right).
    pub fn explain(&self, e: VerifyError, plans: &[Plan]) -> VerifyError {
        let element = |rank: Option<usize>, buf, index| {
            self.map
                .element(rank.expect("per-element errors name a rank"), buf, index)
        };
        let kind = match e.kind {
            ErrorKind::WrongResult {
                buf,
                index,
                problem,
            } => ErrorKind::WrongResult {
                buf,
                index: element(e.rank, buf, index),
                problem: self.problem(problem),
            },
            ErrorKind::NotReproducible { index } => ErrorKind::NotReproducible {
                index: element(e.rank, Buf::Output, index),
            },
            ErrorKind::Deadlock { stuck } => ErrorKind::Deadlock {
                stuck: stuck
                    .into_iter()
                    .map(|s| Stuck {
                        op: plans[s.rank].steps[s.step].op.clone(),
                        ..s
                    })
                    .collect(),
            },
            other => other,
        };
        VerifyError { kind, ..e }
    }

    fn problem(&self, problem: Problem) -> Problem {
        let input = |(rank, index)| (rank, self.map.element(rank, Buf::Input, index));
        match problem {
            Problem::WrongElement { got, expected } => Problem::WrongElement {
                got: input(got),
                expected: input(expected),
            },
            other => other,
        }
    }
}
