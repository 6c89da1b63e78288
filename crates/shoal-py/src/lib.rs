//! The `shoal._shoal` extension module: communicators, work handles, errors
//! and plan inspection. Buffers arrive as (address, byte length) pairs that
//! the Python layer has validated and keeps alive; nothing is copied here.

mod switch;

use std::sync::Arc;
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

use shoal_core::comm::{CollArgs, Communicator};
use shoal_core::exec::CallBuffers;
use shoal_core::init::{init_world, InitArgs};
use shoal_core::select::parse_collective;
use shoal_core::work::Work;
use shoal_core::{DType, Error, ErrorKind, ReduceOp};

create_exception!(
    _shoal,
    ShoalError,
    PyRuntimeError,
    "A collective or the runtime failed."
);
create_exception!(_shoal, PeerDiedError, ShoalError, "A peer rank died.");
create_exception!(
    _shoal,
    MismatchError,
    ShoalError,
    "Ranks called mismatched collectives."
);
create_exception!(
    _shoal,
    AbortedError,
    ShoalError,
    "A peer rank aborted the job."
);
create_exception!(
    _shoal,
    ShoalTimeoutError,
    PyTimeoutError,
    "Nothing moved for SHOAL_TIMEOUT seconds."
);

fn to_py(e: Error) -> PyErr {
    match e.kind {
        ErrorKind::InvalidArgument => PyValueError::new_err(e.message),
        ErrorKind::PeerDied => PeerDiedError::new_err(e.message),
        ErrorKind::Mismatch => MismatchError::new_err(e.message),
        ErrorKind::Aborted => AbortedError::new_err(e.message),
        ErrorKind::Timeout => ShoalTimeoutError::new_err(e.message),
        ErrorKind::Runtime => ShoalError::new_err(e.message),
    }
}

fn invalid(msg: String) -> PyErr {
    PyValueError::new_err(msg)
}

/// A group of ranks that run collectives together.
#[pyclass(module = "shoal._shoal", name = "Communicator", frozen)]
struct PyCommunicator {
    inner: Arc<Communicator>,
}

/// A started asynchronous collective.
#[pyclass(module = "shoal._shoal", name = "Work", frozen)]
struct PyWork {
    inner: Arc<Work>,
}

#[pymethods]
impl PyWork {
    /// Blocks until the collective is done; raises its error if it failed.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let inner = self.inner.clone();
        py.allow_threads(move || inner.wait(timeout.map(Duration::from_secs_f64)))
            .map_err(to_py)
    }

    fn is_completed(&self) -> bool {
        self.inner.is_completed()
    }
}

#[pymethods]
impl PyCommunicator {
    #[getter]
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    #[getter]
    fn size(&self) -> usize {
        self.inner.size()
    }

    /// Global ranks of the members in group order.
    #[getter]
    fn members(&self) -> Vec<usize> {
        self.inner.members().to_vec()
    }

    /// Global ranks that share this process's host (shared memory peers).
    #[getter]
    fn local_ranks(&self) -> Vec<usize> {
        self.inner.engine().local_ranks.clone()
    }

    /// The cost model in use: {"alpha": s, "beta": s/byte, "gamma": s/byte}.
    #[getter]
    fn cost_model(&self) -> std::collections::HashMap<&'static str, f64> {
        let c = self.inner.engine().selector.cost();
        [
            ("alpha", c.alpha),
            ("beta", c.beta),
            ("gamma", c.gamma),
            ("alpha_local", c.alpha_local),
            ("beta_local", c.beta_local),
        ]
        .into_iter()
        .collect()
    }

    /// Runs one collective over raw buffers (address, bytes).
    #[pyo3(signature = (collective, count, dtype, op, root, algorithm, input, output, async_op))]
    #[allow(clippy::too_many_arguments)]
    fn collective(
        &self,
        py: Python<'_>,
        collective: &str,
        count: usize,
        dtype: &str,
        op: &str,
        root: usize,
        algorithm: Option<String>,
        input: Option<Bound<'_, PyAny>>,
        output: Option<Bound<'_, PyAny>>,
        async_op: bool,
    ) -> PyResult<Option<PyWork>> {
        let args = CollArgs {
            collective: parse_collective(collective).map_err(to_py)?,
            count,
            dtype: DType::from_name(dtype).map_err(invalid)?,
            op: ReduceOp::from_name(op).map_err(invalid)?,
            root,
            algorithm,
        };
        let (input, input_bytes) = raw_buffer(input.as_ref(), false)?;
        let (output, output_bytes) = raw_buffer(output.as_ref(), true)?;
        let bufs = CallBuffers {
            input: input as *const u8,
            input_bytes,
            output,
            output_bytes,
        };
        let comm = self.inner.clone();
        if async_op {
            let work = comm.collective_async(&args, bufs).map_err(to_py)?;
            return Ok(Some(PyWork { inner: work }));
        }
        let bufs = SendableBuffers(bufs);
        py.allow_threads(move || {
            let bufs = bufs;
            comm.collective(&args, bufs.0)
        })
        .map_err(to_py)?;
        Ok(None)
    }

    /// Sends the buffer (of `dtype` elements) to group rank `peer`.
    fn send(
        &self,
        py: Python<'_>,
        peer: usize,
        tag: u32,
        dtype: &str,
        data: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let dtype = DType::from_name(dtype).map_err(invalid)?;
        let (address, bytes) = raw_buffer(Some(&data), false)?;
        let address = address as usize;
        let comm = self.inner.clone();
        py.allow_threads(move || {
            comm.send(peer, tag, dtype, address as *const u8, bytes / dtype.size())
        })
        .map_err(to_py)
    }

    /// Receives from group rank `peer` into the buffer (of `dtype` elements).
    fn recv(
        &self,
        py: Python<'_>,
        peer: usize,
        tag: u32,
        dtype: &str,
        data: Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let dtype = DType::from_name(dtype).map_err(invalid)?;
        let (address, bytes) = raw_buffer(Some(&data), true)?;
        let address = address as usize;
        let comm = self.inner.clone();
        py.allow_threads(move || {
            comm.recv(peer, tag, dtype, address as *mut u8, bytes / dtype.size())
        })
        .map_err(to_py)
    }

    /// A sub-communicator; every member of this one must call it alike.
    fn new_group(&self, ranks: Vec<usize>) -> PyResult<Option<PyCommunicator>> {
        let group = self.inner.new_group(&ranks).map_err(to_py)?;
        Ok(group.map(|c| PyCommunicator { inner: Arc::new(c) }))
    }

    /// Waits for every asynchronous collective issued so far.
    fn synchronize(&self, py: Python<'_>) {
        let comm = self.inner.clone();
        py.allow_threads(move || comm.synchronize());
    }

    /// Which algorithm the selector would run for a call (for inspection).
    #[pyo3(signature = (collective, count, dtype, root=0, algorithm=None))]
    fn choose_algorithm(
        &self,
        collective: &str,
        count: usize,
        dtype: &str,
        root: usize,
        algorithm: Option<&str>,
    ) -> PyResult<String> {
        let collective = parse_collective(collective).map_err(to_py)?;
        let dtype = DType::from_name(dtype).map_err(invalid)?;
        self.inner
            .choose_algorithm(collective, count, dtype, root, algorithm)
            .map_err(to_py)
    }
}

/// The address and byte length of a C-contiguous buffer-protocol object
/// (`None` is an empty buffer). The view is released at once: the Python
/// layer keeps the object alive for the whole call.
fn raw_buffer(obj: Option<&Bound<'_, PyAny>>, writable: bool) -> PyResult<(*mut u8, usize)> {
    let Some(obj) = obj else {
        return Ok((std::ptr::null_mut(), 0));
    };
    let flags = ffi::PyBUF_C_CONTIGUOUS | if writable { ffi::PyBUF_WRITABLE } else { 0 };
    // SAFETY: `view` is filled by PyObject_GetBuffer on success and released right after.
    unsafe {
        let mut view: ffi::Py_buffer = std::mem::zeroed();
        if ffi::PyObject_GetBuffer(obj.as_ptr(), &mut view, flags) != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        let raw = (view.buf as *mut u8, view.len as usize);
        ffi::PyBuffer_Release(&mut view);
        Ok(raw)
    }
}

struct SendableBuffers(CallBuffers);
// SAFETY: the Python layer keeps the buffers alive for the whole call.
unsafe impl Send for SendableBuffers {}

/// Joins the job described by the arguments or the environment and returns
/// the world communicator.
#[pyfunction]
#[pyo3(signature = (rank=None, world_size=None, addr=None))]
fn init(
    py: Python<'_>,
    rank: Option<usize>,
    world_size: Option<usize>,
    addr: Option<String>,
) -> PyResult<PyCommunicator> {
    let args = InitArgs {
        rank,
        world_size,
        addr,
    };
    let comm = py.allow_threads(move || init_world(&args)).map_err(to_py)?;
    Ok(PyCommunicator {
        inner: Arc::new(comm),
    })
}

/// Names of the built-in algorithms of a collective.
#[pyfunction]
fn algorithms(collective: &str) -> PyResult<Vec<&'static str>> {
    let c = parse_collective(collective).map_err(to_py)?;
    Ok(shoal_plan::algorithms::for_collective(c)
        .map(|a| a.name)
        .collect())
}

#[pymodule]
fn _shoal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyCommunicator>()?;
    m.add_class::<PyWork>()?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(switch::switch_main, m)?)?;
    m.add("ShoalError", py.get_type::<ShoalError>())?;
    m.add("PeerDiedError", py.get_type::<PeerDiedError>())?;
    m.add("MismatchError", py.get_type::<MismatchError>())?;
    m.add("AbortedError", py.get_type::<AbortedError>())?;
    m.add("ShoalTimeoutError", py.get_type::<ShoalTimeoutError>())?;
    Ok(())
}
