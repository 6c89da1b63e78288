//! The simulator (crate shoal-sim) for `shoal sim` and `shoal.sim`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use shoal_sim::plan::PlanRequest;

/// Simulates one collective call (`shoal sim plan`); returns the report as
/// a JSON object string (`time_s`, `events`, `events_per_s`, `wall_s`, ...).
/// `ValueError` names a bad argument. Releases the GIL while simulating.
#[pyfunction]
#[pyo3(signature = (collective, algo, ranks, size, topology, link=None, latency=None, buffer=None, engine="packet", ranks_per_host=1, seed=0, host_overhead=None))]
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
        engine: engine.to_string(),
        ranks_per_host,
        seed,
        host_overhead,
    };
    py.allow_threads(|| request.run())
        .map(|report| report.to_json())
        .map_err(PyValueError::new_err)
}
