//! Inspection of a call without running it (for tools and tests): the
//! algorithm chosen for it and the steps of this rank's plan, read from the
//! decision its calls run by (`decide.rs`).

use shoal_plan::Collective;

use super::decide::DecisionKey;
use super::{CollArgs, Communicator};
use crate::dtype::{DType, ReduceOp};
use crate::error::Result;
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
        let key = self.inspected_key(collective, count, dtype, root, explicit)?;
        let (decision, _) = self.decision(&key, source)?;
        // Read without touching the measurements (only calls made do).
        let st = self.state.lock().unwrap();
        let leading = st.adapting.peek(&key).map(|adapt| adapt.leader().name());
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
        let key = self.inspected_key(collective, count, dtype, root, explicit)?;
        let (_, cp) = self.decision(&key, source)?;
        Ok(cp.plan.steps.len())
    }

    /// The decision key of a call that is inspected, not run
    /// (`choose_algorithm`, `plan_steps`): it does not count towards the
    /// switch's retry.
    fn inspected_key(
        &self,
        collective: Collective,
        count: usize,
        dtype: DType,
        root: usize,
        explicit: Option<&str>,
    ) -> Result<DecisionKey> {
        let named = explicit
            .map(|name| Named::resolve(collective, name))
            .transpose()?;
        let args = CollArgs {
            root,
            algorithm: named,
            ..CollArgs::new(collective, count, dtype)
        };
        let shape = self.shape(&args)?;
        Ok(self.decision_key(&args, shape, ReduceOp::Sum, false))
    }
}
