//! Scenarios and the PANAMA reproduction (crate shoal-sim) for
//! `shoal sim run` and `shoal sim panama`.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use shoal_sim::panama::{fig10, fig8_point_recorded, Variant};
use shoal_sim::scenario::{file, health, records, run_with, ScenarioConfig};

use crate::sim::{value_error, Registered};

/// Runs a scenario: the TOML file `config` if given (read and parsed in
/// Rust, as `shoal-sim run` does), with the `(dotted key, value)` pairs
/// of `overrides` set over it; the pairs alone without a file. Returns the
/// report as a JSON object string and the run's warnings (a degenerate
/// run: no iteration finished, carried load far below offered).
/// `progress`, if given, is called with the simulated fraction done
/// (0..1). Releases the GIL while simulating. `out`, if given, is the
/// directory for the run's records (`flows.csv`, `iterations.csv`,
/// `links.csv`). `ValueError` names the file, the line and the key of a
/// bad key or value; `OSError` a file not written.
#[pyfunction]
#[pyo3(signature = (overrides, progress=None, out=None, config=None))]
pub fn sim_run_json(
    py: Python<'_>,
    overrides: Vec<(String, String)>,
    progress: Option<PyObject>,
    out: Option<std::path::PathBuf>,
    config: Option<std::path::PathBuf>,
) -> PyResult<(String, Vec<String>)> {
    let cfg = match config {
        Some(path) => file::read_with(&path, &overrides).map_err(value_error)?,
        None => ScenarioConfig::from_pairs(&overrides).map_err(value_error)?,
    };
    let result = py.allow_threads(|| {
        let mut report = |fraction: f64| {
            if let Some(cb) = &progress {
                // A failing callback must not stop the simulation.
                Python::with_gil(|py| drop(cb.call1(py, (fraction,))));
            }
        };
        run_with(&cfg, &mut report, &Registered)
    });
    let result = result.map_err(value_error)?;
    if let Some(dir) = out {
        records::write(&result, &dir)
            .map_err(|e| PyOSError::new_err(format!("{}: {e}", dir.display())))?;
    }
    Ok((result.to_json(), health::warnings(&result)))
}

/// One point of PANAMA's Fig. 8: `variant` (ideal, ring, switchml, panama,
/// panama-0.88, ...) at total load `load` over the scenario `pairs`; the
/// point as a JSON object string (the pairs as `sim_run_json`'s
/// overrides, over no file). `out`, if given, is the directory for
/// the point's records (as `sim_run_json`'s).
#[pyfunction]
#[pyo3(signature = (pairs, variant, load, out=None))]
pub fn sim_panama_fig8_json(
    py: Python<'_>,
    pairs: Vec<(String, String)>,
    variant: &str,
    load: f64,
    out: Option<std::path::PathBuf>,
) -> PyResult<String> {
    let cfg = ScenarioConfig::from_pairs(&pairs).map_err(value_error)?;
    let variant = Variant::parse(variant).map_err(value_error)?;
    py.allow_threads(|| fig8_point_recorded(&cfg, variant, load, out.as_deref()))
        .map(|p| p.to_json())
        .map_err(value_error)
}

/// PANAMA's Fig. 10: rates of a background and an aggregation flow on one
/// link, with or without PANAMA's congestion control; JSON time series.
#[pyfunction]
pub fn sim_panama_fig10_json(congestion_control: bool) -> PyResult<String> {
    fig10(congestion_control)
        .map(|s| s.to_json())
        .map_err(value_error)
}

/// Adds this module's functions to `_shoal`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sim_run_json, m)?)?;
    m.add_function(wrap_pyfunction!(sim_panama_fig8_json, m)?)?;
    m.add_function(wrap_pyfunction!(sim_panama_fig10_json, m)?)?;
    Ok(())
}
