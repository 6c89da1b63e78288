//! Scenarios and the PANAMA reproduction (crate shoal-sim) for
//! `shoal sim run` and `shoal sim panama`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use shoal_sim::panama::{fig10, fig8_point, Variant};
use shoal_sim::scenario::{run, ScenarioConfig};

/// Runs a scenario given as flat `(key, value)` pairs (the dotted keys of
/// its TOML file); returns the report as a JSON object string. `progress`,
/// if given, is called with the simulated fraction done (0..1). Releases
/// the GIL while simulating. `ValueError` names a bad key or value.
#[pyfunction]
#[pyo3(signature = (pairs, progress=None))]
pub fn sim_run_json(
    py: Python<'_>,
    pairs: Vec<(String, String)>,
    progress: Option<PyObject>,
) -> PyResult<String> {
    let cfg = ScenarioConfig::from_pairs(&pairs).map_err(PyValueError::new_err)?;
    let result = py.allow_threads(|| {
        let mut report = |fraction: f64| {
            if let Some(cb) = &progress {
                // A failing callback must not stop the simulation.
                Python::with_gil(|py| drop(cb.call1(py, (fraction,))));
            }
        };
        run(&cfg, &mut report)
    });
    result.map(|r| r.to_json()).map_err(PyValueError::new_err)
}

/// One point of PANAMA's Fig. 8: `variant` (ideal, ring, switchml, panama,
/// panama-0.88, ...) at total load `load` over the scenario `pairs`; the
/// point as a JSON object string.
#[pyfunction]
pub fn sim_panama_fig8_json(
    py: Python<'_>,
    pairs: Vec<(String, String)>,
    variant: &str,
    load: f64,
) -> PyResult<String> {
    let cfg = ScenarioConfig::from_pairs(&pairs).map_err(PyValueError::new_err)?;
    let variant = Variant::parse(variant).map_err(PyValueError::new_err)?;
    py.allow_threads(|| fig8_point(&cfg, variant, load))
        .map(|p| p.to_json())
        .map_err(PyValueError::new_err)
}

/// PANAMA's Fig. 10: rates of a background and an aggregation flow on one
/// link, with or without PANAMA's congestion control; JSON time series.
#[pyfunction]
pub fn sim_panama_fig10_json(congestion_control: bool) -> PyResult<String> {
    fig10(congestion_control)
        .map(|s| s.to_json())
        .map_err(PyValueError::new_err)
}

/// Adds this module's functions to `_shoal`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sim_run_json, m)?)?;
    m.add_function(wrap_pyfunction!(sim_panama_fig8_json, m)?)?;
    m.add_function(wrap_pyfunction!(sim_panama_fig10_json, m)?)?;
    Ok(())
}
