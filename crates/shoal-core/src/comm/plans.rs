//! The plan executor, the provider of every call no other runs: priced at
//! the selector's cheapest algorithm for the call (built-in or registered),
//! it runs the call by that algorithm's plan. The plans of a communicator's
//! calls are cached per call shape, algorithm and rank.

use std::sync::Arc;

use shoal_plan::{CallShape, Plan};

use super::providers::CallProvider;
use super::{CommState, Communicator, Prepared, RunCall};
use crate::error::{Error, Result};
use crate::exec::{CallBuffers, CompiledPlan};
use crate::provider::{Market, Provider};
use crate::reduce::divide;
use crate::registry::Choice;
use crate::select::PlanSource;

/// The plan executor.
pub(super) struct Plans;

pub(super) static PLANS: Plans = Plans;

impl Provider for Plans {
    fn can_run(&self, _: &Market, _: &CallShape, _: usize) -> bool {
        true
    }
    fn cost(&self, market: &Market, shape: &CallShape, elem_size: usize) -> Result<f64> {
        market.plan_cost(shape, elem_size)
    }
}

impl CallProvider for Plans {
    fn runner(&self, _: &Communicator, _: &CallShape) -> Result<Box<dyn RunCall>> {
        Ok(Box::new(RunPlan)) // no allocation: a unit struct
    }
}

/// A call run by the plan the selector chose for it: it needs no sequence
/// number beyond the call's own.
struct RunPlan;

impl RunCall for RunPlan {
    fn reserve(&mut self, _: &mut CommState) {}
    fn run(&self, comm: &Communicator, p: &Prepared, bufs: CallBuffers) -> Result<()> {
        comm.run_plan(p, bufs)
    }
    fn waits_only_in_transport(&self) -> bool {
        true // the executor's waits
    }
}

impl Communicator {
    /// The plan of this rank for a call shape and algorithm, from the cache
    /// or built (outside the cache's lock) and cached. A registered
    /// algorithm's plan comes from `source` and must pass the checks the
    /// executor relies on (regions in bounds, peers in the group).
    pub(super) fn plan(
        &self,
        shape: CallShape,
        choice: Choice,
        source: Option<&dyn PlanSource>,
    ) -> Result<Arc<CompiledPlan>> {
        self.cached_plan(shape, choice.id(), |shape| match choice {
            Choice::Builtin(alg) => Ok((alg.generate)(shape, self.rank)),
            Choice::Registered(alg) => {
                let source = source.ok_or_else(|| {
                    Error::invalid(format!(
                        "{} algorithm '{}' is registered from Python and runs only in calls made from Python",
                        alg.collective, alg.name
                    ))
                })?;
                let plan = source.plan(alg, shape, self.rank)?;
                shoal_plan::verify::check_plan(shape, self.rank, &plan).map_err(|e| {
                    Error::invalid(format!("{} algorithm '{}': {e}", alg.collective, alg.name))
                })?;
                Ok(plan)
            }
        })
    }

    /// The plan of this rank for a call shape and plan id, from the cache or
    /// built by `build` (outside the cache's lock) and cached.
    pub(super) fn cached_plan(
        &self,
        shape: CallShape,
        id: u32,
        build: impl FnOnce(&CallShape) -> Result<Plan>,
    ) -> Result<Arc<CompiledPlan>> {
        let key = (shape, id, self.rank);
        if let Some(cp) = self.engine.plans.lock().unwrap().get(&key) {
            return Ok(cp);
        }
        let cp = Arc::new(CompiledPlan::new(build(&key.0)?));
        self.engine.plans.lock().unwrap().insert(key, cp.clone());
        Ok(cp)
    }

    pub(super) fn run_plan(&self, p: &Prepared, bufs: CallBuffers) -> Result<()> {
        let describe = || p.describe();
        let ctx = self.call_context(p.seq, p.sig, p.dtype, p.op, &describe);
        let engine = &self.engine;
        let staged = engine.staging.stage(p.in_place, bufs);
        engine.run(&p.cp, &ctx, staged.bufs)?;
        staged.finish();
        if let Some(n) = p.divide_by {
            // SAFETY: the output buffer was validated by prepare.
            let out = unsafe { std::slice::from_raw_parts_mut(bufs.output, bufs.output_bytes) };
            divide(p.dtype, out, n);
        }
        Ok(())
    }
}
