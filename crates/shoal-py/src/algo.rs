//! Plans for `shoal.algo`: algorithms written in Python are lowered here
//! through the Rust [`PlanBuilder`], so they get the same dependency
//! inference and pipelining as the built-in ones; plans of every rank of a
//! call go to and from JSON and through the verifier.

use std::cell::RefCell;

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;

use shoal_core::registry::{self, Registered};
use shoal_core::select::{self, CostFactors, PlanSource};

use shoal_plan::builder::Msg;
use shoal_plan::json::buf_from_name;
use shoal_plan::verify::verify_plans;
use shoal_plan::{algorithms, CallPlans, CallShape, PlanBuilder, Region};

use crate::invalid;

/// A call shape as Python passes it: `(collective, world, count, root,
/// chunk, ranks_per_host, counts)`.
pub type ShapeTuple = (
    String,
    usize,
    usize,
    usize,
    usize,
    usize,
    Option<Vec<usize>>,
);

/// A region as Python passes it: `(buffer, offset, length)`.
type RegionTuple = (String, usize, usize);

/// One builder operation as Python records it: `(kind, peer, round, src,
/// dst)`; messages use `peer`, `round` and one region, copy and reduce both
/// regions.
type OpTuple = (
    String,
    usize,
    usize,
    Option<RegionTuple>,
    Option<RegionTuple>,
);

pub fn shape_from(t: ShapeTuple) -> PyResult<CallShape> {
    let (name, world, count, root, chunk, ranks_per_host, counts) = t;
    let collective = registry::parse_collective(&name).map_err(|e| crate::to_py(e.into()))?;
    if world == 0 {
        return Err(invalid("world must be at least 1"));
    }
    if collective.rooted() && root >= world {
        return Err(invalid(format!(
            "{collective}: root {root} is not a rank of a world of {world}"
        )));
    }
    let shape = CallShape {
        collective,
        world,
        count,
        root: if collective.rooted() { root } else { 0 },
        chunk: chunk.max(1),
        ranks_per_host: ranks_per_host.max(1),
        counts: counts.map(Into::into),
    };
    shape.check().map_err(|e| invalid(e.to_string()))?;
    match (&shape.counts, shape.counts_len()) {
        (Some(_), None) => Err(invalid(format!("{collective} takes no per-rank counts"))),
        (Some(c), Some(want)) if c.len() != want => Err(invalid(format!(
            "a {collective} of world {world} takes {want} counts, got {}",
            c.len()
        ))),
        _ => Ok(shape),
    }
}

pub fn shape_tuple(s: &CallShape) -> ShapeTuple {
    (
        s.collective.name().to_string(),
        s.world,
        s.count,
        s.root,
        s.chunk,
        s.ranks_per_host,
        s.counts.as_ref().map(|c| c.to_vec()),
    )
}

/// The plans of every rank of one call (`shoal.algo.Plan` in Python).
#[pyclass(module = "shoal._shoal", name = "CallPlans", frozen)]
pub struct PyCallPlans {
    pub inner: CallPlans,
    /// For plans lowered from Python: per rank, the index of the builder
    /// operation each step came from (an operation becomes one step per piece).
    origins: Option<Vec<Vec<usize>>>,
}

#[pymethods]
impl PyCallPlans {
    /// Reads the JSON document (schema in docs/algorithms.md).
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<PyCallPlans> {
        let inner = CallPlans::from_json(text).map_err(|e| invalid(e.to_string()))?;
        Ok(PyCallPlans {
            inner,
            origins: None,
        })
    }

    fn to_json(&self) -> String {
        self.inner.to_json()
    }

    #[getter]
    fn shape(&self) -> ShapeTuple {
        shape_tuple(&self.inner.shape)
    }

    #[getter]
    fn algorithm(&self) -> Option<String> {
        self.inner.algorithm.clone()
    }

    /// The steps of `rank`, each `(text, deps)`, e.g. `("Send to 1 tag 0 Output[0..4]", [0])`.
    fn steps(&self, rank: usize) -> PyResult<Vec<(String, Vec<usize>)>> {
        let plan = self.plan(rank)?;
        Ok(plan
            .steps
            .iter()
            .map(|s| {
                let text = shoal_plan::verify::OpText(&s.op).to_string();
                (text, s.deps.to_vec())
            })
            .collect())
    }

    /// Scratch elements the plan of `rank` uses.
    fn scratch(&self, rank: usize) -> PyResult<usize> {
        Ok(self.plan(rank)?.scratch_len)
    }

    /// The builder operation step `step` of `rank` came from, for plans lowered from Python.
    fn origin(&self, rank: usize, step: usize) -> Option<usize> {
        self.origins.as_ref()?.get(rank)?.get(step).copied()
    }

    /// Runs the verifier: None when the plans are right, else
    /// `(message, rank, step)` with the rank and step to blame where one is.
    fn verify(&self) -> Option<(String, Option<usize>, Option<usize>)> {
        let err = verify_plans(&self.inner.shape, &self.inner.plans).err()?;
        let at = err.location(&self.inner.plans);
        Some((err.to_string(), at.map(|a| a.0), at.map(|a| a.1)))
    }

    fn __eq__(&self, other: &PyCallPlans) -> bool {
        self.inner == other.inner
    }

    fn __repr__(&self) -> String {
        let s = &self.inner.shape;
        format!(
            "Plan({}, algorithm={:?}, world={}, count={}, steps={})",
            s.collective,
            self.inner.algorithm.as_deref().unwrap_or("?"),
            s.world,
            s.count,
            self.inner
                .plans
                .iter()
                .map(|p| p.steps.len())
                .sum::<usize>()
        )
    }
}

impl PyCallPlans {
    fn plan(&self, rank: usize) -> PyResult<&shoal_plan::Plan> {
        self.inner.plans.get(rank).ok_or_else(|| {
            invalid(format!(
                "rank {rank} is outside this plan of {} ranks",
                self.inner.plans.len()
            ))
        })
    }
}

/// The plans a built-in algorithm makes for every rank of a call.
#[pyfunction]
pub fn builtin_plans(shape: ShapeTuple, algorithm: &str) -> PyResult<PyCallPlans> {
    let shape = shape_from(shape)?;
    let alg = algorithms::find(shape.collective, algorithm).map_err(|e| invalid(e.to_string()))?;
    if let Some(why) = alg.refuses(&shape) {
        return Err(invalid(format!(
            "{} algorithm '{}' {why}",
            shape.collective, alg.name
        )));
    }
    let plans = (0..shape.world)
        .map(|r| (alg.generate)(&shape, r))
        .collect();
    Ok(PyCallPlans {
        inner: CallPlans {
            algorithm: Some(format!("{}/{}", shape.collective, alg.name)),
            shape,
            plans,
        },
        origins: None,
    })
}

/// Lowers the operations Python recorded for every rank (`ranks[r]` is
/// `(scratch elements, operations)` of rank `r`) into plans.
#[pyfunction]
#[pyo3(signature = (shape, ranks, algorithm=None))]
pub fn lower_plans(
    shape: ShapeTuple,
    ranks: Vec<(usize, Vec<OpTuple>)>,
    algorithm: Option<String>,
) -> PyResult<PyCallPlans> {
    let shape = shape_from(shape)?;
    let mut plans = Vec::with_capacity(ranks.len());
    let mut origins = Vec::with_capacity(ranks.len());
    for (rank, (scratch, ops)) in ranks.into_iter().enumerate() {
        let (plan, origin) = lower(&shape, rank, scratch, &ops)?;
        plans.push(plan);
        origins.push(origin);
    }
    Ok(PyCallPlans {
        inner: CallPlans {
            shape,
            algorithm,
            plans,
        },
        origins: Some(origins),
    })
}

/// One rank's operations through a [`PlanBuilder`]; returns the plan and
/// the operation each step came from. Checks what the builder would
/// otherwise panic on; the verifier checks the rest.
pub fn lower(
    shape: &CallShape,
    rank: usize,
    scratch: usize,
    ops: &[OpTuple],
) -> PyResult<(shoal_plan::Plan, Vec<usize>)> {
    let mut b = PlanBuilder::new(shape, rank);
    b.scratch(scratch);
    let mut origin = Vec::new();
    for (i, (kind, peer, round, src, dst)) in ops.iter().enumerate() {
        let fail = |what: String| invalid(format!("rank {rank} operation {i} ({kind}): {what}"));
        let region = |r: &Option<RegionTuple>, name: &str| -> PyResult<Region> {
            let (buf, offset, len) = r
                .as_ref()
                .ok_or_else(|| fail(format!("needs a {name} region")))?;
            let buf = buf_from_name(buf).ok_or_else(|| fail(format!("unknown buffer {buf:?}")))?;
            offset
                .checked_add(*len)
                .ok_or_else(|| fail("region end overflows".into()))?;
            Ok(Region::new(buf, *offset, *len))
        };
        let steps = match kind.as_str() {
            "send" | "recv" | "recv_reduce" => {
                if *round >= b.round_limit() {
                    return Err(fail(format!(
                        "round {round} is too large for 32-bit tags (limit {})",
                        b.round_limit()
                    )));
                }
                let (msg, r) = match kind.as_str() {
                    "send" => (Msg::Send, region(src, "src")?),
                    "recv" => (Msg::Recv, region(dst, "dst")?),
                    _ => (Msg::RecvReduce, region(dst, "dst")?),
                };
                b.message(msg, *peer, *round, r, &[])
            }
            "copy" | "reduce" => {
                let (s, d) = (region(src, "src")?, region(dst, "dst")?);
                if s.len != d.len {
                    return Err(fail(format!(
                        "source has {} elements, destination {}",
                        s.len, d.len
                    )));
                }
                if kind == "copy" {
                    b.copy(s, d)
                } else {
                    b.reduce(s, d)
                }
            }
            _ => return Err(fail("unknown operation".into())),
        };
        origin.resize(origin.len() + steps.len(), i);
    }
    Ok((b.finish(), origin))
}

/// The Python object whose `plan(collective, name, shape, rank)` and
/// `cost(collective, name, world)` serve registered algorithms
/// (`shoal.algo._registry`), set once.
static SOURCE: GILOnceCell<PyObject> = GILOnceCell::new();

/// Registers algorithm `name` of `collective`, whose plans and cost `source`
/// (the same object every time) supplies on the calling thread.
#[pyfunction]
pub fn register_algorithm(
    py: Python<'_>,
    collective: &str,
    name: &str,
    source: PyObject,
) -> PyResult<()> {
    let installed = SOURCE.get_or_init(py, || source.clone_ref(py));
    if !installed.is(&source) {
        return Err(invalid("a different plan source is already installed"));
    }
    let collective = registry::parse_collective(collective).map_err(|e| crate::to_py(e.into()))?;
    select::register(collective, name).map_err(crate::to_py)?;
    Ok(())
}

/// The registry's Python side, asked on the thread that makes the call while
/// it holds the GIL (the `py` token proves it): the core never enters the
/// interpreter from a thread of its own. A Python exception raised by the
/// algorithm is kept, so the caller sees it rather than a flattened message.
pub struct PySource<'py> {
    py: Python<'py>,
    raised: RefCell<Option<PyErr>>,
}

impl<'py> PySource<'py> {
    pub fn new(py: Python<'py>) -> PySource<'py> {
        PySource {
            py,
            raised: RefCell::new(None),
        }
    }

    /// The Python exception to raise for a core error of a call made with this source.
    pub fn to_py(&self, e: shoal_core::Error) -> PyErr {
        self.raised
            .borrow_mut()
            .take()
            .unwrap_or_else(|| crate::to_py(e))
    }

    fn keep(&self, e: PyErr) -> shoal_core::Error {
        let error = shoal_core::Error::invalid(e.to_string());
        *self.raised.borrow_mut() = Some(e);
        error
    }

    fn call(
        &self,
        method: &str,
        args: impl IntoPyObject<'py, Target = pyo3::types::PyTuple>,
    ) -> shoal_core::Result<Bound<'py, PyAny>> {
        let source = SOURCE
            .get(self.py)
            .ok_or_else(|| shoal_core::Error::invalid("no algorithm is registered from Python"))?;
        source
            .bind(self.py)
            .call_method1(method, args)
            .map_err(|e| self.keep(e))
    }
}

impl PlanSource for PySource<'_> {
    fn plan(
        &self,
        alg: Registered,
        shape: &CallShape,
        rank: usize,
    ) -> shoal_core::Result<shoal_plan::Plan> {
        let args = (alg.collective.name(), alg.name, shape_tuple(shape), rank);
        let built = self.call("plan", args)?;
        let (scratch, ops): (usize, Vec<OpTuple>) = built.extract().map_err(|e| self.keep(e))?;
        let (plan, _) = lower(shape, rank, scratch, &ops).map_err(|e| self.keep(e))?;
        Ok(plan)
    }

    fn digest(&self, alg: Registered, shape: &CallShape) -> shoal_core::Result<u64> {
        let args = (alg.collective.name(), alg.name, shape_tuple(shape));
        let digest = self.call("digest", args)?;
        digest.extract().map_err(|e| self.keep(e))
    }

    fn cost(&self, alg: Registered, world: usize) -> shoal_core::Result<Option<CostFactors>> {
        let factors = self.call("cost", (alg.collective.name(), alg.name, world))?;
        let factors: Option<(f64, f64, f64)> = factors.extract().map_err(|e| self.keep(e))?;
        Ok(factors.map(|(messages, bytes, reduced)| CostFactors {
            messages,
            bytes,
            reduced,
        }))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCallPlans>()?;
    m.add_function(wrap_pyfunction!(builtin_plans, m)?)?;
    m.add_function(wrap_pyfunction!(lower_plans, m)?)?;
    m.add_function(wrap_pyfunction!(register_algorithm, m)?)?;
    Ok(())
}
