//! What `shoal info` reports about the configuration: the table of `SHOAL_*`
//! variables and the launcher this environment describes.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use shoal_core::config::{Config, VARIABLES};
use shoal_core::rendezvous::{detect_from_process_env, job_id, Explicit};

/// Every `SHOAL_*` variable shoal reads, as dicts with `name`, `default`
/// (empty when computed or unset), `meaning` and `read_in`.
#[pyfunction]
pub fn config_variables(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    VARIABLES
        .iter()
        .map(|v| {
            let d = PyDict::new(py);
            d.set_item("name", v.name)?;
            d.set_item("default", v.default)?;
            d.set_item("meaning", v.meaning)?;
            d.set_item("read_in", v.read_in)?;
            Ok(d)
        })
        .collect()
}

/// The launcher convention `shoal.init()` would follow in this environment,
/// as a dict (`source`: "shoal", "torchrun", "slurm", "openmpi" or "default",
/// with rank, world size, master and job id); `ValueError` when the
/// environment is inconsistent, with the reason `init` would give.
#[pyfunction]
pub fn detect_launcher(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let info = detect_from_process_env(&Explicit::default())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let d = PyDict::new(py);
    d.set_item("source", info.source)?;
    d.set_item("rank", info.rank)?;
    d.set_item("world_size", info.world_size)?;
    d.set_item("local_rank", info.local_rank)?;
    d.set_item("local_world_size", info.local_world_size)?;
    d.set_item("master_addr", info.master_addr)?;
    d.set_item("master_port", info.master_port)?;
    d.set_item("store_addr", info.store_addr)?;
    d.set_item("store_path", info.store_path)?;
    d.set_item("job_id", job_id(&|k| std::env::var(k).ok()))?;
    Ok(d)
}

/// Why the `SHOAL_*` settings of this environment would fail `init`, or
/// `None` when they are valid (the same check `init` makes first).
#[pyfunction]
pub fn config_error() -> Option<String> {
    Config::from_process_env().err().map(|e| e.message)
}
