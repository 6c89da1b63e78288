//! The common call's short route: a blocking allreduce, broadcast or reduce
//! in place on one buffer that describes itself, straight from Python's
//! arguments to the core. Two doors lead here: `Communicator.run_in_place`
//! and the methods of [`GroupCalls`], the native base of `shoal.Group`.
//!
//! `Group`'s in-place collectives are native methods because a Python
//! method costs a frame: about 1100 instructions, a fifth of an 8-byte
//! call (docs/benchmarks.md). What the short route declines (an
//! asynchronous call, a dtype named, a buffer or argument of another kind,
//! a wrong one) goes, with its arguments as the caller gave them, to
//! `Group`'s checked Python method (`_allreduce_checked`, ...), which runs
//! it or names what is wrong: so both routes take the same arguments and
//! raise the same errors.

use std::sync::Arc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString, PyTuple};

use shoal_core::comm::{CollArgs, Communicator};
use shoal_core::exec::CallBuffers;
use shoal_core::provider::Named;
use shoal_core::ReduceOp;
use shoal_plan::Collective;

use crate::buffers::{release_deferred, Held};
use crate::{algo, names, ndarray, run_collective, run_collective_holding_gil, PyCommunicator};

/// Calls of at most this many bytes run holding the GIL until they wait
/// long (`gil`): beyond it, the GIL's 150 ns are no call's concern.
const HOLD_GIL_BYTES: usize = 64 << 10;

/// An in-place call's arguments as Python objects; None: the default
/// (op "sum", root 0, the selector's algorithm).
#[derive(Default)]
pub(crate) struct InPlaceArgs<'py> {
    pub op: Option<Bound<'py, PyAny>>,
    pub root: Option<Bound<'py, PyAny>>,
    pub algorithm: Option<Bound<'py, PyAny>>,
}

impl<'py> InPlaceArgs<'py> {
    /// Where the argument of parameter `name` goes (None: not one of these).
    fn slot(&mut self, name: &str) -> Option<&mut Option<Bound<'py, PyAny>>> {
        match name {
            "op" => Some(&mut self.op),
            "root" => Some(&mut self.root),
            "algorithm" => Some(&mut self.algorithm),
            _ => None,
        }
    }
}

/// Runs `kind` in place on `x`, blocking; Ok(false), having run nothing,
/// where `x` or an argument is not of the plain kind (no buffer, not
/// C-contiguous or writable, a type shoal lacks, an unknown op or
/// algorithm, a root that is not an int of the group).
pub(crate) fn run_in_place(
    py: Python<'_>,
    comm: &Arc<Communicator>,
    kind: Collective,
    x: &Bound<'_, PyAny>,
    given: &InPlaceArgs<'_>,
) -> PyResult<bool> {
    release_deferred(py);
    let root = match &given.root {
        None => 0,
        Some(root) => match root_of(root, comm.size()) {
            Some(root) => root,
            None => return Ok(false),
        },
    };
    // As `Group`: a broadcast reads only the root's buffer, a reduce
    // writes only the root's (the others' may be read-only).
    let at_root = comm.rank() == root;
    let reads = kind != Collective::Broadcast || at_root;
    let writes = kind != Collective::Reduce || at_root;
    // A plain numpy array is read off its struct; other buffers export.
    let (span, dtype, held) = match ndarray::plain_span(x, writes) {
        Some((address, bytes, dtype)) => ((address, bytes), dtype, None),
        None => {
            let Some((held, dtype)) = Held::export_typed(x, writes) else {
                return Ok(false);
            };
            (held.span(), dtype, Some(held))
        }
    };
    let op = match &given.op {
        None => ReduceOp::Sum,
        Some(op) => match names::REDUCE_OPS.find(op) {
            Some(op) => op,
            None => return Ok(false),
        },
    };
    if kind.reduces() && op.check(dtype).is_err() {
        return Ok(false);
    }
    let algorithm = match &given.algorithm {
        None => None,
        Some(name) => match algorithm_of(kind, name) {
            Some(algorithm) => algorithm,
            None => return Ok(false),
        },
    };
    let (address, bytes) = span;
    let args = CollArgs {
        algorithm,
        op: if kind.reduces() { op } else { ReduceOp::Sum },
        root,
        ..CollArgs::new(kind, bytes / dtype.size(), dtype)
    };
    let bufs = CallBuffers {
        input: if reads { address } else { std::ptr::null_mut() },
        input_bytes: if reads { bytes } else { 0 },
        output: if writes {
            address
        } else {
            std::ptr::null_mut()
        },
        output_bytes: if writes { bytes } else { 0 },
    };
    let source = algo::PySource::new(py);
    if bytes <= HOLD_GIL_BYTES {
        run_collective_holding_gil(py, comm, &args, bufs, &source)?;
    } else {
        run_collective(py, comm, &args, bufs, &source)?;
    }
    drop(held); // after the call
    Ok(true)
}

/// `root` as a rank of a group of `size`, if it is exactly an int in range
/// (`Group` names what is wrong with any other).
fn root_of(root: &Bound<'_, PyAny>, size: usize) -> Option<usize> {
    let root: usize = root.downcast_exact::<PyInt>().ok()?.extract().ok()?;
    (root < size).then_some(root)
}

/// The algorithm `name` asks for, if it is None (Some(None): the selector
/// chooses) or the name of one of `kind`'s (`Group` names what is wrong with
/// anything else).
fn algorithm_of(kind: Collective, name: &Bound<'_, PyAny>) -> Option<Option<Named>> {
    if name.is_none() {
        return Some(None);
    }
    let name = name.downcast::<PyString>().ok()?.to_cow().ok()?;
    Named::resolve(kind, &name).ok().map(Some)
}

/// The native base of `shoal.Group`: the communicator it runs on (`_comm`,
/// None once closed) and its in-place collectives (see the module's note).
#[pyclass(module = "shoal._shoal", subclass)]
pub(crate) struct GroupCalls {
    comm: Option<Py<PyCommunicator>>,
}

/// The parameters of an in-place collective, in their Python order.
struct Signature {
    kind: Collective,
    positional: &'static [&'static str],
}

const ALLREDUCE: Signature = Signature {
    kind: Collective::Allreduce,
    positional: &["x", "op"],
};
const BROADCAST: Signature = Signature {
    kind: Collective::Broadcast,
    positional: &["x", "root"],
};
const REDUCE: Signature = Signature {
    kind: Collective::Reduce,
    positional: &["x", "root", "op"],
};

impl GroupCalls {
    /// Runs the call on the short route where it can; else hands the
    /// arguments, as given, to `Group`'s checked method.
    fn call<'py>(
        slf: &Bound<'py, Self>,
        sig: &Signature,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<PyObject> {
        let py = slf.py();
        // Not borrowed through the call, which may run Python code.
        let comm = slf.borrow().comm.as_ref().map(|c| c.clone_ref(py));
        if let Some(comm) = comm {
            if let Some(x) = Self::short_route(py, &comm, sig, args, kwargs)? {
                return Ok(x);
            }
        }
        // The checked method of `Group` takes any call the short route declines.
        let checked = match sig.kind {
            Collective::Allreduce => intern!(py, "_allreduce_checked"),
            Collective::Broadcast => intern!(py, "_broadcast_checked"),
            _ => intern!(py, "_reduce_checked"),
        };
        Ok(slf.getattr(checked)?.call(args, kwargs)?.unbind())
    }

    /// The call's buffer once run on the short route; None where the
    /// arguments are not of its plain kind (nothing has run then).
    fn short_route(
        py: Python<'_>,
        comm: &Py<PyCommunicator>,
        sig: &Signature,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<PyObject>> {
        let Some((x, given)) = bind(sig, args, kwargs) else {
            return Ok(None);
        };
        let comm = comm.bind(py).get().comm()?;
        if !run_in_place(py, &comm, sig.kind, &x, &given)? {
            return Ok(None);
        }
        Ok(Some(x.unbind()))
    }
}

/// The arguments of a call of `sig`: its buffer and the others given; None
/// where any argument is not for the short route: no buffer, `async_op`
/// other than False, `dtype` other than None, or anything the signature
/// does not take (the checked method raises the TypeError).
fn bind<'py>(
    sig: &Signature,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> Option<(Bound<'py, PyAny>, InPlaceArgs<'py>)> {
    if args.len() > sig.positional.len() {
        return None;
    }
    let mut x = None;
    let mut given = InPlaceArgs::default();
    let mut put = |name: &str, value: Bound<'py, PyAny>| {
        let slot = if name == "x" {
            &mut x
        } else {
            given.slot(name)?
        };
        // Given twice: for the checked method's TypeError.
        slot.replace(value).is_none().then_some(())
    };
    for (value, name) in args.iter().zip(sig.positional) {
        put(name, value)?;
    }
    for (key, value) in kwargs.into_iter().flatten() {
        match names::IN_PLACE_KEYWORDS.find(&key)? {
            "async_op" if value.downcast::<PyBool>().is_ok_and(|b| !b.is_true()) => {}
            "dtype" if value.is_none() => {}
            name if name == "algorithm" || sig.positional.contains(&name) => put(name, value)?,
            _ => return None,
        }
    }
    Some((x?, given))
}

#[pymethods]
impl GroupCalls {
    #[new]
    #[pyo3(signature = (comm=None))]
    fn new(comm: Option<Py<PyCommunicator>>) -> GroupCalls {
        GroupCalls { comm }
    }

    /// The communicator; None once the group is closed.
    #[getter(_comm)]
    fn comm(&self, py: Python<'_>) -> Option<Py<PyCommunicator>> {
        self.comm.as_ref().map(|c| c.clone_ref(py))
    }

    #[setter(_comm)]
    fn set_comm(&mut self, comm: Option<Py<PyCommunicator>>) {
        self.comm = comm;
    }

    /// Reduces ``x`` across the group with ``op``, in place; returns ``x``
    /// (or a ``Work`` whose ``wait()`` returns it, if ``async_op``).
    ///
    /// ``algorithm`` forces one of ``shoal.algorithms("allreduce")``;
    /// ``dtype`` names the element type where the buffer's own cannot (bfloat16).
    #[pyo3(signature = (*args, **kwargs),
           text_signature = "($self, x, op='sum', *, algorithm=None, async_op=False, dtype=None)")]
    fn allreduce<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<PyObject> {
        Self::call(slf, &ALLREDUCE, args, kwargs)
    }

    /// Copies the root's ``x`` into ``x`` on every rank, in place; returns ``x`` (or a ``Work``).
    #[pyo3(signature = (*args, **kwargs),
           text_signature = "($self, x, root=0, *, algorithm=None, async_op=False, dtype=None)")]
    fn broadcast<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<PyObject> {
        Self::call(slf, &BROADCAST, args, kwargs)
    }

    /// Reduces ``x`` with ``op`` into the root's ``x``, in place; other ranks' ``x`` is unchanged.
    /// Returns ``x`` (or a ``Work``).
    #[pyo3(signature = (*args, **kwargs),
           text_signature = "($self, x, root=0, op='sum', *, algorithm=None, async_op=False, dtype=None)")]
    fn reduce<'py>(
        slf: &Bound<'py, Self>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<PyObject> {
        Self::call(slf, &REDUCE, args, kwargs)
    }
}
