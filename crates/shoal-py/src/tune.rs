//! The tuning tables a process would load (`shoal info`, `shoal tune`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use shoal_core::config::host_cpus;
use shoal_core::tune::{local_vendor, Machine, Tables, Transport};

/// The tables the selector consults, in order: `path`'s (default
/// `SHOAL_TUNE_FILE`'s; empty: none) and the built-in one (unless
/// `SHOAL_TUNE_BUILTIN` is off), as `{"tables": [{"source",
/// "rows"}], "cpus": <this host's>, "vendor": <its CPU's>}`, rows in their canonical text;
/// `ValueError` naming the file, line and problem when one does not parse.
#[pyfunction]
#[pyo3(signature = (path=None))]
pub fn tune_tables(py: Python<'_>, path: Option<String>) -> PyResult<Bound<'_, PyDict>> {
    let path = path
        .or_else(|| std::env::var("SHOAL_TUNE_FILE").ok())
        .filter(|p| !p.trim().is_empty());
    let machine = Machine {
        transport: Transport::Shm,
        // As init counts them; a bad SHOAL_HOST_CPUS (which fails init,
        // reported by `config_error`) counts as unset: this process's CPUs.
        cpus: host_cpus(&|k| std::env::var(k).ok())
            .or_else(|_| host_cpus(&|_| None))
            .unwrap_or(1),
        vendor: local_vendor(),
    };
    // As the core reads the flag (a bad value fails init, reported by `config_error`).
    let builtin = !std::env::var("SHOAL_TUNE_BUILTIN").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    });
    let tables = Tables::load(path.as_deref(), builtin, machine)
        .map_err(|e| PyValueError::new_err(e.message))?;
    let listed = tables
        .tables
        .iter()
        .map(|t| {
            let d = PyDict::new(py);
            d.set_item("source", &t.source)?;
            d.set_item(
                "rows",
                t.rows.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            )?;
            Ok(d)
        })
        .collect::<PyResult<Vec<_>>>()?;
    let d = PyDict::new(py);
    d.set_item("tables", listed)?;
    d.set_item("cpus", machine.cpus)?;
    d.set_item("vendor", machine.vendor.name())?;
    d.set_item("digest", format!("{:016x}", tables.digest()))?;
    Ok(d)
}
