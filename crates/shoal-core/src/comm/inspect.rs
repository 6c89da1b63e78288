//! Inspection of a call without running it (for tools and tests): the
//! algorithm chosen for it and the steps of this rank's plan.

use shoal_plan::{CallShape, Collective};

use super::{CollArgs, Communicator};
use crate::dtype::{DType, ReduceOp};
use crate::error::Result;
use crate::registry;
use crate::select::PlanSource;

impl Communicator {
    /// The algorithm the selector picks for a call (for inspection and tests).
    pub fn choose_algorithm(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
        source: Option<&dyn PlanSource>,
    ) -> Result<String> {
        let (args, shape) = self.inspected(collective, count, dtype, root, explicit)?;
        if let Some((name, _)) = self.provider_for(&args, &shape, source)?.algorithm() {
            return Ok(name.to_string());
        }
        let explicit = explicit.filter(|&a| !registry::is_switch_algorithm(a));
        let choice = self
            .engine
            .selector
            .choose(&shape, dtype.size(), explicit, source)?;
        Ok(choice.name().to_string())
    }

    /// How many steps this rank's plan of a call has, run by the host
    /// algorithm the selector picks (for inspection and tests: a trace has
    /// one event per executed step).
    pub fn plan_steps(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
        source: Option<&dyn PlanSource>,
    ) -> Result<usize> {
        let (_, shape) = self.inspected(collective, count, dtype, root, explicit)?;
        let choice = self
            .engine
            .selector
            .choose(&shape, dtype.size(), explicit, source)?;
        Ok(self.plan(shape, choice, source)?.plan.steps.len())
    }

    /// The arguments and shape of a call that is inspected, not run
    /// (`choose_algorithm`, `plan_steps`).
    fn inspected(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
    ) -> Result<(CollArgs, CallShape)> {
        let args = CollArgs {
            collective,
            count,
            counts: None,
            dtype,
            op: ReduceOp::Sum,
            root,
            algorithm: explicit.map(str::to_string),
        };
        let shape = self.shape(&args)?;
        Ok((args, shape))
    }
}
