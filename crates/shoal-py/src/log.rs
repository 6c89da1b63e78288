//! Rust's log records for Python's `logging` (python/shoal/_log.py).
//!
//! Rust threads never take the GIL to log: they queue records
//! (`shoal_core::log::forward`), and a Python thread takes them with
//! `_log_take`, which waits with the GIL released, then hands them to
//! `logging` itself. See docs/architecture.md, "Logging".

use std::time::Duration;

use pyo3::prelude::*;
use shoal_core::log::forward::{self, Forwarded};
use shoal_core::log::Level;

/// One record as Python gets it: (level as `logging`'s number, target
/// such as `shoal_core::ina`, message, the line as Rust writes it, time in
/// seconds since the epoch, whether the log file already has it, rank or
/// None in the switch).
type PyRecord = (u8, String, String, String, f64, bool, Option<usize>);

fn to_py(f: Forwarded) -> PyRecord {
    let r = f.record;
    let level = match r.level {
        Level::ERROR => 40,
        Level::WARN => 30,
        Level::INFO => 20,
        Level::DEBUG => 10,
        Level::TRACE => 5,
    };
    let line = r.line();
    (
        level,
        r.target,
        r.message,
        line,
        r.time,
        f.written,
        r.who.and_then(|w| w.rank()),
    )
}

/// From now on this process's records are queued for `_log_take`.
#[pyfunction]
fn _log_attach() {
    forward::attach();
}

/// Waits up to `timeout` seconds for records and returns those queued;
/// None once `_log_detach` was called.
#[pyfunction]
fn _log_take(py: Python<'_>, timeout: f64) -> Option<Vec<PyRecord>> {
    let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX);
    let records = py.allow_threads(|| forward::take(timeout))?;
    Some(records.into_iter().map(to_py).collect())
}

/// Stops queueing (later records go to the log file or stderr directly)
/// and returns the records not yet taken.
#[pyfunction]
fn _log_detach() -> Vec<PyRecord> {
    forward::detach().into_iter().map(to_py).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_log_attach, m)?)?;
    m.add_function(wrap_pyfunction!(_log_take, m)?)?;
    m.add_function(wrap_pyfunction!(_log_detach, m)?)?;
    Ok(())
}
