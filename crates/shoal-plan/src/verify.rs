//! The plan verifier: checks the plans of all ranks of one call together, by
//! structure checks and symbolic execution.
//!
//! Every element's value is modelled as the multiset of `(rank, input index)`
//! contributions it holds: Copy and Recv replace it, Reduce and RecvReduce
//! merge. Messages use rendezvous semantics (a send completes only together
//! with its receive), the strictest a transport may choose, so a plan that
//! passes runs on any transport. The checks, in order:
//!
//! 1. [`structure`]: regions in bounds, Input never written, deps backwards;
//! 2. [`matching`]: each Send matched by exactly one receive and vice versa;
//! 3. [`races`]: no two unordered steps of a rank touch overlapping regions
//!    where one writes (Input and Output count as one buffer when the call
//!    may be in place, and Input must not be read after Output is written);
//!    [`shared`]: shared-memory reads name an exposed flag of a rank on the
//!    same host, in bounds; each Release follows its Expose and counts its
//!    reads; nothing writes an exposed region before its Release;
//! 4. [`exec`]: running all ranks completes (else the stuck steps are named);
//! 5. [`expect`]: each Output holds the collective's result;
//! 6. [`reproducible`]: for allreduce, every rank combines each element in
//!    the same order (up to commutativity), so results agree bit for bit;
//! 7. [`barrier`]: for barriers, no rank can leave before all have entered.
//!
//! Steps 4 to 6 hold a value per element; they run on a model of the call
//! with one element per run of elements the plans always move together
//! ([`segments`]), which decides the same and bounds the memory.

mod barrier;
mod error;
mod exec;
mod expect;
mod matching;
mod races;
mod reproducible;
mod segments;
mod shared;
mod structure;

pub use error::{ErrorKind, OpText, Problem, RegionText, Stuck, VerifyError};
pub use races::MAX_STEPS;
pub use segments::{max_modeled, MAX_MODELED};
pub use structure::{check_plan, check_scratch};

use crate::algorithms::Algorithm;
use crate::plan::{CallShape, Collective, Plan};

/// Verifies the plans of one call; `plans[r]` must be the plan of rank `r`.
pub fn verify_plans(shape: &CallShape, plans: &[Plan]) -> Result<(), VerifyError> {
    structure::check(shape, plans)?;
    let matches = matching::match_messages(plans)?;
    for plan in plans {
        races::check(shape, plan)?;
        shared::check(shape, plan, &matches)?;
    }
    let model = segments::Model::of(shape, plans, &matches)?;
    check_values(&model.shape, &model.plans).map_err(|e| model.explain(e, plans))?;
    if shape.collective == Collective::Barrier {
        barrier::check(plans, &matches)?;
    }
    Ok(())
}

/// The checks that hold a value per element: run on the [`segments`] model,
/// so their memory does not grow with the count.
fn check_values(shape: &CallShape, plans: &[Plan]) -> Result<(), VerifyError> {
    let matches = matching::match_messages(plans)?;
    let mut contributions = exec::Contributions { world: shape.world };
    let memories = exec::run(&mut contributions, shape, plans, &matches)?;
    expect::check(shape, &memories)?;
    if shape.collective == Collective::Allreduce {
        reproducible::check(shape, plans, &matches)?;
    }
    Ok(())
}

/// Generates the plans of every rank with `alg` and verifies them.
pub fn verify(alg: &Algorithm, shape: &CallShape) -> Result<(), VerifyError> {
    if alg.collective != shape.collective {
        return Err(VerifyError::global(ErrorKind::WrongCollective {
            algorithm: alg.collective,
            call: shape.collective,
        }));
    }
    let plans: Vec<Plan> = (0..shape.world).map(|r| (alg.generate)(shape, r)).collect();
    verify_plans(shape, &plans)
}
