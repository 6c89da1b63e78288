//! The names Python passes on every call ("allreduce", "sum"), matched
//! without converting the string where possible: under the 3.9 stable ABI
//! pyo3 converts a `str` by encoding it into a new bytes object, a tenth of
//! a small call. Python interns the strings of literals that look like
//! identifiers, so the name a caller wrote is, in the common case, the very
//! object `PyString::intern` returns for it: a name is matched by address
//! first, by value otherwise.

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyString;

use shoal_core::ReduceOp;
use shoal_plan::Collective;

/// A set of values known by their names.
pub struct Names<T: Copy + 'static> {
    values: &'static [T],
    name: fn(T) -> &'static str,
    /// `values`' names as Python interns them, in the same order.
    interned: GILOnceCell<Vec<Py<PyString>>>,
}

impl<T: Copy + 'static> Names<T> {
    const fn new(values: &'static [T], name: fn(T) -> &'static str) -> Names<T> {
        Names {
            values,
            name,
            interned: GILOnceCell::new(),
        }
    }

    /// The value `s` names; None for anything else (a `str` of no value's
    /// name, or no `str` at all).
    pub fn find(&self, s: &Bound<'_, PyAny>) -> Option<T> {
        let py = s.py();
        let interned = self.interned.get_or_init(py, || {
            let intern = |&v: &T| PyString::intern(py, (self.name)(v)).unbind();
            self.values.iter().map(intern).collect()
        });
        if let Some(i) = interned.iter().position(|n| n.is(s)) {
            return Some(self.values[i]);
        }
        let text = s.downcast::<PyString>().ok()?.to_cow().ok()?;
        self.values
            .iter()
            .copied()
            .find(|&v| (self.name)(v) == text)
    }
}

/// The reduction ops, by `ReduceOp::name`.
pub static REDUCE_OPS: Names<ReduceOp> = Names::new(&ReduceOp::ALL, ReduceOp::name);

/// The collectives that run in place on one buffer (`run_in_place`).
pub static IN_PLACE: Names<Collective> = Names::new(
    &[
        Collective::Allreduce,
        Collective::Broadcast,
        Collective::Reduce,
    ],
    Collective::name,
);

/// The keyword arguments of `Group`'s in-place collectives (`in_place`):
/// a call site's keywords are interned, so they match by address.
pub static IN_PLACE_KEYWORDS: Names<&'static str> = Names::new(
    &["x", "op", "root", "algorithm", "async_op", "dtype"],
    |name| name,
);
