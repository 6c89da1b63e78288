//! Inspection of a call without running it (for tools and tests): the
//! algorithm chosen for it and the steps of this rank's plan, read from the
//! decision its calls run by (`decide.rs`).

use std::sync::Arc;

use shoal_plan::Collective;

use super::decide::Decision;
use super::{CollArgs, Communicator};
use crate::dtype::{DType, ReduceOp};
use crate::error::Result;
use crate::exec::CompiledPlan;
use crate::provider::Named;
use crate::select::PlanSource;

impl Communicator {
    /// The algorithm a call runs: the switch's, or the plan's; where its
    /// shape's calls choose as they run, the one leading now (for
    /// inspection and tests).
    pub fn choose_algorithm(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
        source: Option<&dyn PlanSource>,
    ) -> Result<String> {
        let (decision, _) = self.inspected(collective, count, dtype, root, explicit, source)?;
        let leading = self.leading(collective, count, dtype, root, explicit)?;
        Ok(leading.unwrap_or(decision.name).to_string())
    }

    /// How many steps this rank's plan of a call has: the host algorithm's
    /// (through the switch, the fallback's) (for inspection and tests: a
    /// trace has one event per executed step).
    pub fn plan_steps(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
        source: Option<&dyn PlanSource>,
    ) -> Result<usize> {
        let (_, cp) = self.inspected(collective, count, dtype, root, explicit, source)?;
        Ok(cp.plan.steps.len())
    }

    /// The contender leading the measurements of a call's shape, if its
    /// calls have made any (`adapt.rs`; read without touching them).
    fn leading(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
    ) -> Result<Option<&'static str>> {
        if explicit.is_some() {
            return Ok(None);
        }
        let args = CollArgs {
            root,
            ..CollArgs::new(collective, count, dtype)
        };
        let key = self.decision_key(&args, self.shape(&args)?, ReduceOp::Sum, false);
        let st = self.state.lock().unwrap();
        Ok(st.adapting.peek(&key).map(|adapt| adapt.leader().name()))
    }

    /// The decision of a call that is inspected, not run (`choose_algorithm`,
    /// `plan_steps`): it does not count towards the switch's retry.
    fn inspected(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
        source: Option<&dyn PlanSource>,
    ) -> Result<(Decision, Arc<CompiledPlan>)> {
        let named = explicit
            .map(|name| Named::resolve(collective, name))
            .transpose()?;
        let args = CollArgs {
            root,
            algorithm: named,
            ..CollArgs::new(collective, count, dtype)
        };
        let shape = self.shape(&args)?;
        let key = self.decision_key(&args, shape, ReduceOp::Sum, false);
        self.decision(&key, source)
    }
}
