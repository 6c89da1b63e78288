//! The `shoal._shoal` extension module: communicators, work handles, errors
//! and plan inspection. Buffers arrive as buffer-protocol objects; each call
//! holds their exports (see `buffers`) until it is done. Nothing is copied.

mod algo;
mod buffers;
mod call;
mod config;
mod gil;
mod in_place;
mod log;
mod names;
mod ndarray;
mod sim;
mod sim_run;
mod switch;
mod tune;
mod world;

use std::sync::Arc;
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::prelude::*;

use shoal_core::comm::{CollArgs, Communicator, PreparedCall};
use shoal_core::exec::CallBuffers;
use shoal_core::init::{init_world, InitArgs};
use shoal_core::registry::parse_collective;
use shoal_core::work::Work;
use shoal_core::{DType, Error, ErrorKind};
use shoal_plan::Collective;

use buffers::{release_deferred, Held};
use call::PyCall;
use world::{Slot, World};

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
        ErrorKind::OutOfMemory => PyMemoryError::new_err(e.message),
    }
}

fn invalid(msg: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(msg.to_string())
}

/// A group of ranks that run collectives together.
#[pyclass(module = "shoal._shoal", name = "Communicator", frozen)]
struct PyCommunicator {
    slot: Arc<Slot>,
    world: Arc<World>,
}

/// A started asynchronous collective.
#[pyclass(module = "shoal._shoal", name = "Work", frozen)]
struct PyWork {
    inner: Arc<Work>,
}

#[pymethods]
impl PyWork {
    /// Blocks until the collective is done (or `timeout` seconds pass: the
    /// call then goes on, owning its buffers); raises its error if it failed.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let timeout = wait_limit(timeout)?;
        let inner = self.inner.clone();
        let r = py.allow_threads(move || inner.wait(timeout));
        // A completed call has handed its buffers back: release them now.
        release_deferred(py);
        r.map_err(to_py)
    }

    fn is_completed(&self, py: Python<'_>) -> bool {
        let done = self.inner.is_completed();
        release_deferred(py);
        done
    }
}

impl Drop for PyWork {
    fn drop(&mut self) {
        Python::with_gil(release_deferred);
    }
}

/// `wait`'s limit: None, or seconds >= 0; beyond what a deadline can hold
/// (e.g. `inf`) it is no limit.
fn wait_limit(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() || t < 0.0 => Err(PyValueError::new_err(format!(
            "wait: timeout must be None or a number of seconds >= 0, got {t}"
        ))),
        Some(t) => Ok(Duration::try_from_secs_f64(t).ok()),
    }
}

impl PyCommunicator {
    /// The core communicator; a RuntimeError once its world is finalized.
    fn comm(&self) -> PyResult<Arc<Communicator>> {
        self.slot.get()
    }

    /// Runs a point-to-point `call` on the buffer's memory as elements of
    /// `dtype` (its address and element count), with the GIL released: the
    /// buffer's export (`writable` where the call writes it) is held until
    /// the call returns.
    fn on_buffer<T: Send>(
        &self,
        py: Python<'_>,
        dtype: &str,
        data: &Bound<'_, PyAny>,
        writable: bool,
        call: impl FnOnce(&Communicator, DType, usize, usize) -> shoal_core::Result<T> + Send,
    ) -> PyResult<T> {
        let dtype = DType::from_name(dtype).map_err(invalid)?;
        let data = Held::export(data, writable)?;
        let (address, bytes) = data.span();
        let address = address as usize;
        let comm = self.comm()?;
        blocking(py, move || {
            call(&comm, dtype, address, bytes / dtype.size())
        })
    }
}

#[pymethods]
impl PyCommunicator {
    // Rank, size and members outlive the world, so a finalized group still
    // prints itself.
    #[getter]
    fn rank(&self) -> usize {
        self.slot.rank()
    }

    #[getter]
    fn size(&self) -> usize {
        self.slot.members().len()
    }

    /// Global ranks of the members in group order.
    #[getter]
    fn members(&self) -> Vec<usize> {
        self.slot.members().to_vec()
    }

    /// Whether this communicator's world was finalized (using it raises).
    #[getter]
    fn finalized(&self) -> bool {
        self.slot.is_finalized()
    }

    /// Global ranks that share this process's host (shared memory peers).
    #[getter]
    fn local_ranks(&self) -> PyResult<Vec<usize>> {
        Ok(self.comm()?.engine().local_ranks.clone())
    }

    /// Whether the shared-memory algorithms (`shm_*`, which read peers'
    /// memory) can run: every rank on one host over shm, reads permitted.
    #[getter]
    fn shared_memory_algorithms(&self) -> PyResult<bool> {
        Ok(self.comm()?.engine().selector.shared_memory_allowed())
    }

    /// The cost model in use: {"alpha": s, "beta": s/byte, "gamma": s/byte,
    /// "alpha_local": s, "beta_local": s/byte, "beta_read": s/byte}.
    #[getter]
    fn cost_model(&self) -> PyResult<std::collections::HashMap<&'static str, f64>> {
        let c = self.comm()?.engine().selector.cost();
        Ok([
            ("alpha", c.alpha),
            ("beta", c.beta),
            ("gamma", c.gamma),
            ("alpha_local", c.alpha_local),
            ("beta_local", c.beta_local),
            ("beta_read", c.beta_read),
        ]
        .into_iter()
        .collect())
    }

    /// How long a call may wait without progress before it fails, in seconds
    /// (`SHOAL_TIMEOUT` unless set for this communicator). Setting it takes
    /// effect for the calls issued after; sub-groups start from `SHOAL_TIMEOUT`.
    #[getter]
    fn timeout(&self) -> PyResult<f64> {
        Ok(self.comm()?.timeout().as_secs_f64())
    }

    #[setter]
    fn set_timeout(&self, seconds: f64) -> PyResult<()> {
        if seconds.is_nan() || seconds <= 0.0 {
            return Err(invalid(format!(
                "timeout must be a positive number of seconds, got {seconds}"
            )));
        }
        // Longer than a year is a year (as SHOAL_TIMEOUT): torch's "no timeout" is huge
        let t = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
        self.comm()?.set_timeout(t);
        Ok(())
    }

    /// How many compiled plans this process caches (all communicators).
    #[getter]
    fn plans_cached(&self) -> PyResult<usize> {
        Ok(self.comm()?.plan_cache_usage().0)
    }

    /// The most plans the cache keeps (`SHOAL_PLAN_CACHE`).
    #[getter]
    fn plan_cache_capacity(&self) -> PyResult<usize> {
        Ok(self.comm()?.plan_cache_usage().1)
    }

    /// Runs the collective `call` describes over buffer-protocol objects
    /// (C-contiguous; the output writable). An asynchronous call keeps their
    /// exports until it completes, so dropping the handle or the arrays
    /// cannot free its memory.
    #[pyo3(signature = (call, input, output, async_op=false))]
    fn collective(
        &self,
        py: Python<'_>,
        call: &PyCall,
        input: Option<Bound<'_, PyAny>>,
        output: Option<Bound<'_, PyAny>>,
        async_op: bool,
    ) -> PyResult<Option<PyWork>> {
        let args = &call.args; // (frozen: borrowed for the call, not copied)
        let comm = self.comm()?;
        release_deferred(py);
        let input = Held::export_opt(input.as_ref(), false)?;
        let output = Held::export_opt(output.as_ref(), true)?;
        let (input_ptr, input_bytes) = Held::span_of(&input);
        let (output_ptr, output_bytes) = Held::span_of(&output);
        let bufs = CallBuffers {
            input: input_ptr,
            input_bytes,
            output: output_ptr,
            output_bytes,
        };
        // Prepared here, holding the GIL: a registered algorithm's plan is
        // built in Python on a cache miss (see algo::PySource).
        let source = algo::PySource::new(py);
        if async_op {
            let owner = Box::new((input, output));
            let work = comm
                .collective_async(args, bufs, owner, Some(&source))
                .map_err(|e| source.to_py(e))?;
            return Ok(Some(PyWork { inner: work }));
        }
        run_collective(py, &comm, args, bufs, &source)?;
        // `input` and `output` are released here, after the call.
        Ok(None)
    }

    /// Runs `collective` (allreduce, broadcast or reduce) in place on one
    /// buffer that describes itself (see `in_place`); returns False, having
    /// run nothing, where the buffer or an argument is not of that plain
    /// kind: `Group` then takes the full path, whose checks name the problem.
    #[pyo3(signature = (collective, x, op, root, algorithm))]
    fn run_in_place(
        &self,
        py: Python<'_>,
        collective: &Bound<'_, PyAny>,
        x: &Bound<'_, PyAny>,
        op: &Bound<'_, PyAny>,
        root: &Bound<'_, PyAny>,
        algorithm: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let comm = self.comm()?;
        let Some(kind) = names::IN_PLACE.find(collective) else {
            return Err(invalid(format!(
                "run_in_place: not a collective that runs in place: {collective}"
            )));
        };
        let given = in_place::InPlaceArgs {
            op: Some(op.clone()),
            root: Some(root.clone()),
            algorithm: Some(algorithm.clone()),
        };
        in_place::run_in_place(py, &comm, kind, x, &given)
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
        self.on_buffer(py, dtype, &data, false, |comm, dtype, address, count| {
            comm.send(peer, tag, dtype, address as *const u8, count)
        })
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
        self.on_buffer(py, dtype, &data, true, |comm, dtype, address, count| {
            comm.recv(peer, tag, dtype, address as *mut u8, count)
        })
    }

    /// Receives into the buffer (of `dtype` elements) the first message with
    /// `tag` from any group rank; returns that rank.
    fn recv_any(
        &self,
        py: Python<'_>,
        tag: u32,
        dtype: &str,
        data: Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        self.on_buffer(py, dtype, &data, true, |comm, dtype, address, count| {
            comm.recv_any(tag, dtype, address as *mut u8, count)
        })
    }

    /// A sub-communicator: without `key` every member of this one calls it
    /// alike; with `key` only the new group's members do, with the same key.
    #[pyo3(signature = (ranks, key=None))]
    fn new_group(&self, ranks: Vec<usize>, key: Option<&str>) -> PyResult<Option<PyCommunicator>> {
        let Some(group) = self.comm()?.new_group(&ranks, key).map_err(to_py)? else {
            return Ok(None);
        };
        Ok(Some(PyCommunicator {
            slot: self.world.adopt(group)?,
            world: self.world.clone(),
        }))
    }

    /// Waits for every asynchronous collective issued so far.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let comm = self.comm()?;
        let _ = blocking(py, move || {
            comm.synchronize();
            Ok(())
        });
        Ok(())
    }

    /// Ends every communicator of this one's world (sub-groups too, however
    /// many references to them remain): the transport, its threads and
    /// shared memory, the store server and the switch jobs go; using any of
    /// them afterwards raises. `shoal.finalize()` synchronises first.
    fn finalize(&self, py: Python<'_>) {
        let world = self.world.clone();
        py.allow_threads(move || world.finalize());
        release_deferred(py);
    }

    /// Which algorithm the selector would run for a call (for inspection).
    #[pyo3(signature = (collective, count, dtype, root=0, algorithm=None))]
    fn choose_algorithm(
        &self,
        py: Python<'_>,
        collective: &str,
        count: usize,
        dtype: &str,
        root: usize,
        algorithm: Option<&str>,
    ) -> PyResult<String> {
        let (collective, dtype) = inspected(collective, dtype)?;
        let source = algo::PySource::new(py);
        self.comm()?
            .choose_algorithm(collective, count, dtype, root, algorithm, Some(&source))
            .map_err(|e| source.to_py(e))
    }

    /// How many steps this rank's plan of a call has (the host algorithm
    /// the selector picks, or `algorithm`); a trace has one event per step.
    #[pyo3(signature = (collective, count, dtype, root=0, algorithm=None))]
    fn plan_steps(
        &self,
        py: Python<'_>,
        collective: &str,
        count: usize,
        dtype: &str,
        root: usize,
        algorithm: Option<&str>,
    ) -> PyResult<usize> {
        let (collective, dtype) = inspected(collective, dtype)?;
        let source = algo::PySource::new(py);
        self.comm()?
            .plan_steps(collective, count, dtype, root, algorithm, Some(&source))
            .map_err(|e| source.to_py(e))
    }
}

/// The collective and dtype of a call that is inspected, not run.
fn inspected(collective: &str, dtype: &str) -> PyResult<(Collective, DType)> {
    let collective = parse_collective(collective).map_err(|e| to_py(e.into()))?;
    let dtype = DType::from_name(dtype).map_err(invalid)?;
    Ok((collective, dtype))
}

/// Runs a blocking call without the GIL. Blocking calls first wait for the
/// earlier asynchronous ones, so the exports those dropped are released
/// here: after any blocking call, no finished call holds a buffer.
fn blocking<T: Send>(
    py: Python<'_>,
    call: impl FnOnce() -> shoal_core::Result<T> + Send,
) -> PyResult<T> {
    let r = py.allow_threads(call);
    release_deferred(py);
    r.map_err(to_py)
}

/// Prepares `args` holding the GIL (a registered algorithm's plan is built
/// in Python on a cache miss).
fn prepare(
    py: Python<'_>,
    comm: &Communicator,
    args: &CollArgs,
    bufs: &CallBuffers,
    source: &algo::PySource<'_>,
) -> PyResult<PreparedCall> {
    comm.prepare_collective(args, bufs, Some(source))
        .map_err(|e| {
            release_deferred(py); // as `blocking` does after a failed call
            source.to_py(e)
        })
}

/// Prepares `args` and runs it to its end with the GIL released.
fn run_collective(
    py: Python<'_>,
    comm: &Arc<Communicator>,
    args: &CollArgs,
    bufs: CallBuffers,
    source: &algo::PySource<'_>,
) -> PyResult<()> {
    let call = prepare(py, comm, args, &bufs, source)?;
    let bufs = SendableBuffers(bufs);
    blocking(py, move || {
        let bufs = bufs;
        comm.run_collective(call, bufs.0)
    })
}

/// [`run_collective`] holding the GIL until the call waits long (`gil`).
fn run_collective_holding_gil(
    py: Python<'_>,
    comm: &Arc<Communicator>,
    args: &CollArgs,
    bufs: CallBuffers,
    source: &algo::PySource<'_>,
) -> PyResult<()> {
    let call = prepare(py, comm, args, &bufs, source)?;
    let retake = gil::Retake::new(py);
    let r = comm.run_collective_holding(call, bufs, gil::release);
    drop(retake);
    release_deferred(py);
    r.map_err(to_py)
}

struct SendableBuffers(CallBuffers);
// SAFETY: the caller holds the buffers' exports for the whole (blocking) call.
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
    let world = Arc::new(World::default());
    Ok(PyCommunicator {
        slot: world.adopt(comm)?,
        world,
    })
}

/// Names of the algorithms of a collective: the built-in ones, then those
/// registered from Python (`shoal.algo.register`).
#[pyfunction]
fn algorithms(collective: &str) -> PyResult<Vec<&'static str>> {
    let c = parse_collective(collective).map_err(|e| to_py(e.into()))?;
    let builtin = shoal_plan::algorithms::for_collective(c).map(|a| a.name);
    let registered = shoal_core::registry::registered_for(c)
        .into_iter()
        .map(|r| r.name);
    Ok(builtin.chain(registered).collect())
}

/// The element types, in the core's order: (name, bytes per element, numpy
/// dtype name or None). The Python tables are derived from it (`_buffers`).
#[pyfunction]
fn dtypes() -> Vec<(&'static str, usize, Option<&'static str>)> {
    DType::ALL
        .iter()
        .map(|d| (d.name(), d.size(), d.numpy_name()))
        .collect()
}

#[pymodule]
fn _shoal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyCommunicator>()?;
    m.add_class::<PyWork>()?;
    m.add_class::<PyCall>()?;
    m.add_class::<in_place::GroupCalls>()?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(switch::switch_main, m)?)?;
    m.add_function(wrap_pyfunction!(config::config_variables, m)?)?;
    m.add_function(wrap_pyfunction!(config::detect_launcher, m)?)?;
    m.add_function(wrap_pyfunction!(config::config_error, m)?)?;
    m.add_function(wrap_pyfunction!(sim::sim_plan_json, m)?)?;
    m.add_function(wrap_pyfunction!(tune::tune_tables, m)?)?;
    sim_run::register(m)?;
    log::register(m)?;
    algo::register(m)?;
    m.add("ShoalError", py.get_type::<ShoalError>())?;
    m.add("PeerDiedError", py.get_type::<PeerDiedError>())?;
    m.add("MismatchError", py.get_type::<MismatchError>())?;
    m.add("AbortedError", py.get_type::<AbortedError>())?;
    m.add("ShoalTimeoutError", py.get_type::<ShoalTimeoutError>())?;
    Ok(())
}
