//! `shoal switch`: the software aggregation switch daemon, run from the CLI.

use pyo3::prelude::*;
use shoal_core::log::{self, Who};

/// Runs the aggregation switch with command-line `argv` until SIGINT or
/// SIGTERM; returns the exit code. The GIL is released while it runs.
#[pyfunction]
pub fn switch_main(py: Python<'_>, argv: Vec<String>) -> PyResult<i32> {
    let logging = log::Settings::from_process_env(log::SWITCH_DEFAULT)
        .and_then(|settings| log::install(settings, Who::Switch));
    if let Err(e) = logging {
        eprintln!("shoal switch: {}", e.message);
        return Ok(2);
    }
    let env = |k: &str| std::env::var(k).ok();
    let secret = move |file: Option<&std::path::Path>| {
        shoal_core::ina::switch_secret(&env, file).map_err(Into::into)
    };
    Ok(py.allow_threads(move || shoal_ina::switch::daemon_main(&argv, &secret)))
}
