//! The simulator (crate shoal-sim) for `shoal sim` and `shoal.sim`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use shoal_core::registry;
use shoal_core::select::PlanSource as _;
use shoal_plan::{CallShape, Collective, Plan};
use shoal_sim::dag::{DagError, PlanSource};
use shoal_sim::plan::PlanRequest;

use crate::algo::{PyCallPlans, PySource};

/// Algorithms registered from Python (`shoal.algo.register`, loaded through
/// `SHOAL_ALGORITHMS` or in the calling process), for the simulator: each
/// rank's plan is what the executor would run, the registered function's
/// operations lowered by the Rust plan builder.
pub struct Registered;

impl PlanSource for Registered {
    fn has(&self, collective: Collective, name: &str) -> bool {
        registry::registered(collective, name).is_some()
    }

    fn plan(&self, name: &str, shape: &CallShape, rank: usize) -> Result<Plan, DagError> {
        let alg = registry::registered(shape.collective, name).ok_or_else(|| {
            DagError::Source(format!("no Python algorithm {}/{name}", shape.collective))
        })?;
        // The simulation runs without the GIL; the algorithm needs it.
        Python::with_gil(|py| {
            let source = PySource::new(py);
            source
                .plan(alg, shape, rank)
                .map_err(|e| DagError::Source(source.to_py(e).to_string()))
        })
    }

    /// A registered name keeps its definition for the life of the process.
    fn reusable(&self) -> bool {
        true
    }
}

/// Simulates one collective call (`shoal sim plan`); returns the report as
/// a JSON object string (`time_s`, `events`, `events_per_s`, `wall_s`, ...).
/// `algo` is a built-in algorithm or one registered from Python; `plans`, a
/// plan document, replaces `collective`, `algo`, `ranks` and `size`.
/// `ValueError` names a bad argument. Releases the GIL while simulating.
#[pyfunction]
#[pyo3(signature = (collective, algo, ranks, size, topology, link=None, latency=None, buffer=None, engine="packet", ranks_per_host=1, seed=0, host_overhead=None, plans=None, tier_rates=None))]
#[allow(clippy::too_many_arguments)]
pub fn sim_plan_json(
    py: Python<'_>,
    collective: String,
    algo: String,
    ranks: usize,
    size: String,
    topology: String,
    link: Option<String>,
    latency: Option<String>,
    buffer: Option<String>,
    engine: &str,
    ranks_per_host: usize,
    seed: u64,
    host_overhead: Option<String>,
    plans: Option<PyRef<'_, PyCallPlans>>,
    tier_rates: Option<String>,
) -> PyResult<String> {
    let request = PlanRequest {
        collective,
        algo,
        ranks,
        size,
        topology,
        link,
        latency,
        buffer,
        tier_rates,
        engine: engine.to_string(),
        ranks_per_host,
        seed,
        host_overhead,
        document: plans.map(|p| p.inner.clone()),
    };
    py.allow_threads(|| request.run_with(&Registered))
        .map(|report| report.to_json())
        .map_err(value_error)
}

/// A simulator error as Python sees it: a `ValueError` with the error's
/// message (shoal-sim's errors are typed; the binding keeps the exceptions
/// and messages `shoal.sim` has always raised).
pub fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}
