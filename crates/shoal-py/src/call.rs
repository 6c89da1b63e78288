//! `Call`: the typed description of one collective call that Python hands to
//! `Communicator.collective`, like gloo's per-collective options objects.
//!
//! Its fields are parsed once, when it is made, into the core's enums
//! (`Collective`, `DType`, `ReduceOp`): a bad value is a `ValueError` naming
//! the field, and the call itself no longer passes strings by position.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use shoal_core::comm::CollArgs;
use shoal_core::provider::Named;
use shoal_core::registry::parse_collective;
use shoal_core::{DType, ReduceOp};
use shoal_plan::Collective;

/// One collective call: which collective, on how many elements of which
/// dtype, with which op, root and algorithm. Immutable once made.
///
/// `count` is the per-rank block size; `counts` replaces it with per-rank
/// sizes (allgather, reduce_scatter: one per rank; alltoall: the
/// `world x world` matrix, row `s` what rank `s` sends to each rank).
#[pyclass(module = "shoal._shoal", name = "Call", frozen)]
pub struct PyCall {
    pub args: CollArgs,
    /// The algorithm's name as the caller wrote it (an alias stays one).
    algorithm: Option<String>,
}

/// `field` as a count or rank (>= 0), or an error naming it.
fn non_negative(collective: &str, field: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| PyValueError::new_err(format!("{collective}: {field}={value} must be >= 0")))
}

/// An error about `field`: `allreduce(op='mean'): unknown reduction op ...`.
fn bad_field(collective: &str, field: &str, value: &str, why: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{collective}({field}='{value}'): {why}"))
}

#[pymethods]
impl PyCall {
    #[new]
    #[pyo3(signature = (collective, *, count=0, dtype="uint8", op="sum", root=0, algorithm=None, counts=None))]
    fn new(
        collective: &str,
        count: i64,
        dtype: &str,
        op: &str,
        root: i64,
        algorithm: Option<String>,
        counts: Option<Vec<i64>>,
    ) -> PyResult<PyCall> {
        let kind = parse_collective(collective)
            .map_err(|e| bad_field("Call", "collective", collective, e))?;
        let name = kind.name();
        let dtype_parsed =
            DType::from_name(dtype).map_err(|e| bad_field(name, "dtype", dtype, e))?;
        let op_parsed = ReduceOp::from_name(op).map_err(|e| bad_field(name, "op", op, e))?;
        if kind.reduces() {
            op_parsed
                .check(dtype_parsed)
                .map_err(|e| bad_field(name, "op", op, e))?;
        }
        // Resolved here, once: the switch's, built-in or registered from
        // Python (shoal.algo.register).
        let named = algorithm
            .as_deref()
            .map(|alg| Named::resolve(kind, alg).map_err(|e| bad_field(name, "algorithm", alg, e)))
            .transpose()?;
        let takes_counts = matches!(
            kind,
            Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall
        );
        let counts = match counts {
            Some(_) if !takes_counts => {
                return Err(PyValueError::new_err(format!(
                    "{name}: takes no per-rank counts (allgather, reduce_scatter and alltoall do)"
                )))
            }
            Some(_) if count != 0 => {
                return Err(PyValueError::new_err(format!(
                    "{name}: pass count or counts, not both"
                )))
            }
            Some(c) => Some(
                c.into_iter()
                    .map(|v| non_negative(name, "counts", v))
                    .collect::<PyResult<Vec<usize>>>()?
                    .into(),
            ),
            None => None,
        };
        Ok(PyCall {
            args: CollArgs {
                collective: kind,
                count: non_negative(name, "count", count)?,
                counts,
                dtype: dtype_parsed,
                op: op_parsed,
                root: non_negative(name, "root", root)?,
                algorithm: named,
            },
            algorithm,
        })
    }

    #[getter]
    fn collective(&self) -> &'static str {
        self.args.collective.name()
    }

    #[getter]
    fn count(&self) -> usize {
        self.args.count
    }

    #[getter]
    fn counts(&self) -> Option<Vec<usize>> {
        self.args.counts.as_ref().map(|c| c.to_vec())
    }

    #[getter]
    fn dtype(&self) -> &'static str {
        self.args.dtype.name()
    }

    #[getter]
    fn op(&self) -> &'static str {
        self.args.op.name()
    }

    #[getter]
    fn root(&self) -> usize {
        self.args.root
    }

    #[getter]
    fn algorithm(&self) -> Option<&str> {
        self.algorithm.as_deref()
    }

    fn __repr__(&self) -> String {
        let a = &self.args;
        let algorithm = match &self.algorithm {
            Some(name) => format!("'{name}'"),
            None => "None".into(),
        };
        let count = match &a.counts {
            Some(c) => format!("counts={c:?}"),
            None => format!("count={}", a.count),
        };
        format!(
            "Call('{}', {count}, dtype='{}', op='{}', root={}, algorithm={algorithm})",
            a.collective.name(),
            a.dtype.name(),
            a.op.name(),
            a.root,
        )
    }
}
