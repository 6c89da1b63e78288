//! `config_variables()`: the table of `SHOAL_*` variables, for `shoal info`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use shoal_core::config::VARIABLES;

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
