//! Plans as JSON, so the simulator, other tools and tests can read and write
//! them: the plans of every rank of one call, with the call shape they were
//! made for. The schema is documented in docs/algorithms.md; in short:
//!
//! ```json
//! {"format": "shoal-plan/1", "algorithm": "allreduce/ring",
//!  "shape": {"collective": "allreduce", "world": 2, "count": 4, "root": 0,
//!            "chunk": 4, "ranks_per_host": 1, "counts": null},
//!  "ranks": [{"rank": 0, "scratch": 0, "steps": [
//!     {"op": "copy", "src": ["input", 0, 4], "dst": ["output", 0, 4], "deps": []},
//!     {"op": "send", "peer": 1, "tag": 0, "src": ["output", 0, 2], "deps": [0]}]}]}
//! ```
//!
//! Regions are `[buffer, offset, length]` in elements. serde_json parses and
//! writes the text. The reader walks the parsed document itself (rather than
//! deriving `Deserialize`) so that a bad document gets an error naming the
//! field, e.g. `ranks[1].steps[4].op`.

use std::fmt;
use std::io;
use std::sync::Arc;

use serde::ser::{SerializeMap, SerializeSeq, SerializeTuple};
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::plan::{Buf, CallShape, Collective, Op, Plan, Region, ShapeError, Step};
use crate::verify::{check_scratch, ErrorKind};

/// The `format` of documents this module writes and reads.
pub const FORMAT: &str = "shoal-plan/1";

/// The plans of every rank of one call: what a JSON document holds.
#[derive(Clone, Debug, PartialEq)]
pub struct CallPlans {
    pub shape: CallShape,
    /// `"<collective>/<name>"` of the algorithm that made them, if known.
    pub algorithm: Option<String>,
    /// `plans[r]` is the plan of rank `r`.
    pub plans: Vec<Plan>,
}

impl CallPlans {
    /// The document, one step per line so diffs and greps stay readable.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, Layout::default());
        Document(self)
            .serialize(&mut ser)
            .expect("a plan document serializes into memory without failing");
        out.push(b'\n');
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }

    /// Reads a document; the error names the field that is wrong.
    pub fn from_json(text: &str) -> Result<CallPlans, PlanJsonError> {
        let doc: Value = serde_json::from_str(text).map_err(|e| PlanJsonError::Syntax {
            line: e.line(),
            column: e.column(),
            message: without_position(&e),
        })?;
        let root = Field::root(&doc);
        let format = root.get("format")?;
        let got = format.str()?;
        if got != FORMAT {
            return Err(format.error(FieldProblem::Format(got.to_string())));
        }
        let algorithm = root
            .opt("algorithm")?
            .map(|a| a.str().map(String::from))
            .transpose()?;
        let shape = shape_from(&root.get("shape")?)?;
        let plans = root
            .get("ranks")?
            .array()?
            .iter()
            .map(|r| plan_from(r, &shape))
            .collect::<Result<Vec<Plan>, PlanJsonError>>()?;
        Ok(CallPlans {
            shape,
            algorithm,
            plans,
        })
    }
}

/// The name of a buffer in documents (and in Python).
pub fn buf_name(buf: Buf) -> &'static str {
    match buf {
        Buf::Input => "input",
        Buf::Output => "output",
        Buf::Scratch => "scratch",
    }
}

/// The buffer a document (or Python) names.
pub fn buf_from_name(name: &str) -> Option<Buf> {
    match name {
        "input" => Some(Buf::Input),
        "output" => Some(Buf::Output),
        "scratch" => Some(Buf::Scratch),
        _ => None,
    }
}

/// Appends `s` as a JSON string (quoted, escaped by serde_json); shared with
/// the project's other JSON writers (the traces, the simulator's reports).
pub fn write_string(out: &mut String, s: &str) {
    // Names and keys rarely need escaping: copy them whole.
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    let escaped = serde_json::to_string(s).expect("a string serializes without failing");
    out.push_str(&escaped);
}

// ---------------------------------------------------------------------------
// Errors

/// Why a text is not a plan document: bad JSON, or a field that is missing
/// or wrong, named by its path (`ranks[0].steps[3].op`).
#[derive(Clone, Debug, PartialEq)]
pub enum PlanJsonError {
    /// The text is not JSON (serde_json's `message`, without its position).
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    /// An object lacks member `key`; `within` is its path (`None`: the
    /// document itself).
    Missing { key: String, within: Option<String> },
    /// The field at `path` is wrong.
    Field { path: String, problem: FieldProblem },
}

/// What is wrong with a field.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldProblem {
    ExpectedObject,
    ExpectedArray,
    ExpectedString,
    /// Not a non-negative integer that fits a `usize`: `got` is the number,
    /// if it was one.
    ExpectedInteger {
        got: Option<String>,
    },
    /// `format` names another format.
    Format(String),
    UnknownCollective(String),
    UnknownOp(String),
    UnknownBuffer(String),
    /// A region of this many items instead of `[buffer, offset, length]`.
    RegionItems(usize),
    /// A region whose `offset + length` overflows.
    RegionEnd,
    /// A 32-bit field (tags, flags, read counts) holding a larger value.
    Not32Bit(&'static str),
    /// The shape describes no call an executor could run.
    Shape(ShapeError),
    /// Per-rank counts, but not one per rank.
    CountsLen {
        collective: Collective,
        world: usize,
        want: usize,
        got: usize,
    },
    /// A plan's scratch beyond what a call of its shape may use.
    Scratch(ErrorKind),
}

impl fmt::Display for PlanJsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanJsonError::Syntax {
                line,
                column,
                message,
            } => write!(
                f,
                "invalid JSON at line {line} (column {column}): {message}"
            ),
            PlanJsonError::Missing { key, within: None } => write!(f, "missing field {key:?}"),
            PlanJsonError::Missing {
                key,
                within: Some(path),
            } => write!(f, "missing field {key:?} in {path}"),
            // The shape's error starts with the field it is about.
            PlanJsonError::Field {
                path,
                problem: FieldProblem::Shape(e),
            } => write!(f, "{path}.{e}"),
            PlanJsonError::Field { path, problem } => write!(f, "{path}: {problem}"),
        }
    }
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldProblem::ExpectedObject => write!(f, "expected an object"),
            FieldProblem::ExpectedArray => write!(f, "expected an array"),
            FieldProblem::ExpectedString => write!(f, "expected a string"),
            FieldProblem::ExpectedInteger { got: None } => {
                write!(f, "expected a non-negative integer")
            }
            FieldProblem::ExpectedInteger { got: Some(n) } => {
                write!(f, "expected a non-negative integer, got {n}")
            }
            FieldProblem::Format(got) => write!(f, "expected {FORMAT:?}, got {got:?}"),
            FieldProblem::UnknownCollective(name) => write!(f, "unknown collective {name:?}"),
            FieldProblem::UnknownOp(op) => write!(
                f,
                "unknown op {op:?}; valid: send, recv, recv_reduce, copy, reduce, expose, \
                 expose_slot, peer_read, peer_read_reduce, release"
            ),
            FieldProblem::UnknownBuffer(name) => {
                write!(f, "unknown buffer {name:?}; valid: input, output, scratch")
            }
            FieldProblem::RegionItems(n) => {
                write!(f, "a region is [buffer, offset, length], got {n} items")
            }
            FieldProblem::RegionEnd => write!(f, "the region's end overflows"),
            FieldProblem::Not32Bit(what) => write!(f, "{what} is 32-bit"),
            FieldProblem::Shape(e) => write!(f, "{e}"),
            FieldProblem::CountsLen {
                collective,
                world,
                want,
                got,
            } => write!(
                f,
                "a {collective} of world {world} takes {want} counts, got {got}"
            ),
            FieldProblem::Scratch(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PlanJsonError {}

/// serde_json's message without the " at line L column C" it ends with
/// (ours says where first).
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

// ---------------------------------------------------------------------------
// Reading

fn shape_from(f: &Field<'_>) -> Result<CallShape, PlanJsonError> {
    let name = f.get("collective")?;
    let collective = Collective::from_name(name.str()?).ok_or_else(|| {
        f.error(FieldProblem::UnknownCollective(
            name.str().unwrap_or_default().to_string(),
        ))
    })?;
    let counts = match f.opt("counts")? {
        None => None,
        Some(c) => Some(
            c.array()?
                .iter()
                .map(|x| x.usize())
                .collect::<Result<Arc<[usize]>, PlanJsonError>>()?,
        ),
    };
    let shape = CallShape {
        collective,
        world: f.get("world")?.usize()?,
        count: f.get("count")?.usize()?,
        root: f.opt("root")?.map_or(Ok(0), |r| r.usize())?,
        chunk: f.get("chunk")?.usize()?,
        ranks_per_host: f.opt("ranks_per_host")?.map_or(Ok(1), |r| r.usize())?,
        counts,
    };
    // Before anything below multiplies or sums the shape's numbers.
    shape.check().map_err(|e| f.error(FieldProblem::Shape(e)))?;
    if let (Some(c), Some(want)) = (&shape.counts, shape.counts_len()) {
        if c.len() != want {
            return Err(f.get("counts")?.error(FieldProblem::CountsLen {
                collective,
                world: shape.world,
                want,
                got: c.len(),
            }));
        }
    }
    Ok(shape)
}

fn plan_from(f: &Field<'_>, shape: &CallShape) -> Result<Plan, PlanJsonError> {
    let steps = f
        .get("steps")?
        .array()?
        .iter()
        .map(step_from)
        .collect::<Result<Vec<Step>, PlanJsonError>>()?;
    Ok(Plan {
        rank: f.get("rank")?.usize()?,
        scratch_len: scratch_from(f, shape)?,
        steps,
    })
}

/// A plan's `scratch`, within what a plan of `shape` may use.
fn scratch_from(f: &Field<'_>, shape: &CallShape) -> Result<usize, PlanJsonError> {
    let Some(field) = f.opt("scratch")? else {
        return Ok(0);
    };
    let scratch = field.usize()?;
    check_scratch(shape, scratch).map_err(|e| field.error(FieldProblem::Scratch(e)))?;
    Ok(scratch)
}

fn step_from(f: &Field<'_>) -> Result<Step, PlanJsonError> {
    let kind = f.get("op")?;
    let message = |f: &Field<'_>| -> Result<(usize, u32), PlanJsonError> {
        Ok((f.get("peer")?.usize()?, f.get("tag")?.u32("tags")?))
    };
    let op = match kind.str()? {
        "send" => {
            let (peer, tag) = message(f)?;
            Op::Send {
                peer,
                tag,
                src: region_from(&f.get("src")?)?,
            }
        }
        name @ ("recv" | "recv_reduce") => {
            let (peer, tag) = message(f)?;
            let dst = region_from(&f.get("dst")?)?;
            if name == "recv" {
                Op::Recv { peer, tag, dst }
            } else {
                Op::RecvReduce { peer, tag, dst }
            }
        }
        name @ ("copy" | "reduce") => {
            let src = region_from(&f.get("src")?)?;
            let dst = region_from(&f.get("dst")?)?;
            if name == "copy" {
                Op::Copy { src, dst }
            } else {
                Op::Reduce { src, dst }
            }
        }
        name @ ("expose" | "expose_slot") => Op::Expose {
            flag: f.get("flag")?.u32("flag")?,
            src: region_from(&f.get("src")?)?,
            slot: name == "expose_slot",
        },
        name @ ("peer_read" | "peer_read_reduce") => {
            let peer = f.get("peer")?.usize()?;
            let flag = f.get("flag")?.u32("flag")?;
            let offset = f.get("offset")?.usize()?;
            let dst = region_from(&f.get("dst")?)?;
            Op::peer_read(peer, flag, offset, dst, name == "peer_read_reduce")
        }
        "release" => Op::Release {
            flag: f.get("flag")?.u32("flag")?,
            reads: f.get("reads")?.u32("reads")?,
        },
        other => return Err(kind.error(FieldProblem::UnknownOp(other.to_string()))),
    };
    let deps: Vec<usize> = match f.opt("deps")? {
        None => Vec::new(),
        Some(d) => d
            .array()?
            .iter()
            .map(|x| x.usize())
            .collect::<Result<_, _>>()?,
    };
    Ok(Step {
        op,
        deps: deps.into(),
    })
}

fn region_from(f: &Field<'_>) -> Result<Region, PlanJsonError> {
    let parts = f.array()?;
    let [name, offset, len] = parts.as_slice() else {
        return Err(f.error(FieldProblem::RegionItems(parts.len())));
    };
    let buf = buf_from_name(name.str()?).ok_or_else(|| {
        name.error(FieldProblem::UnknownBuffer(
            name.str().unwrap_or_default().into(),
        ))
    })?;
    let (offset, len) = (offset.usize()?, len.usize()?);
    if offset.checked_add(len).is_none() {
        return Err(f.error(FieldProblem::RegionEnd));
    }
    Ok(Region::new(buf, offset, len))
}

/// A value of the parsed document and where it sits, for errors.
struct Field<'a> {
    value: &'a Value,
    /// `None` for the document itself.
    path: Option<String>,
}

impl<'a> Field<'a> {
    fn root(value: &'a Value) -> Field<'a> {
        Field { value, path: None }
    }

    fn error(&self, problem: FieldProblem) -> PlanJsonError {
        PlanJsonError::Field {
            path: self.path.clone().unwrap_or_else(|| "document".into()),
            problem,
        }
    }

    /// Member `key` of an object, `None` when absent or null.
    fn opt(&self, key: &str) -> Result<Option<Field<'a>>, PlanJsonError> {
        let Value::Object(members) = self.value else {
            return Err(self.error(FieldProblem::ExpectedObject));
        };
        let path = match &self.path {
            None => key.to_string(),
            Some(p) => format!("{p}.{key}"),
        };
        Ok(members
            .get(key)
            .filter(|v| !v.is_null())
            .map(|value| Field {
                value,
                path: Some(path),
            }))
    }

    fn get(&self, key: &str) -> Result<Field<'a>, PlanJsonError> {
        self.opt(key)?.ok_or_else(|| PlanJsonError::Missing {
            key: key.to_string(),
            within: self.path.clone(),
        })
    }

    fn array(&self) -> Result<Vec<Field<'a>>, PlanJsonError> {
        let Value::Array(items) = self.value else {
            return Err(self.error(FieldProblem::ExpectedArray));
        };
        let path = self.path.as_deref().unwrap_or("document");
        Ok(items
            .iter()
            .enumerate()
            .map(|(i, value)| Field {
                value,
                path: Some(format!("{path}[{i}]")),
            })
            .collect())
    }

    fn str(&self) -> Result<&'a str, PlanJsonError> {
        self.value
            .as_str()
            .ok_or_else(|| self.error(FieldProblem::ExpectedString))
    }

    fn usize(&self) -> Result<usize, PlanJsonError> {
        let Value::Number(n) = self.value else {
            return Err(self.error(FieldProblem::ExpectedInteger { got: None }));
        };
        n.as_u64()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| {
                self.error(FieldProblem::ExpectedInteger {
                    got: Some(n.to_string()),
                })
            })
    }

    /// A 32-bit unsigned field (`what`: tags, flags, read counts).
    fn u32(&self, what: &'static str) -> Result<u32, PlanJsonError> {
        u32::try_from(self.usize()?).map_err(|_| self.error(FieldProblem::Not32Bit(what)))
    }
}

// ---------------------------------------------------------------------------
// Writing

/// The document as serde sees it, in the schema's field order.
struct Document<'a>(&'a CallPlans);

impl Serialize for Document<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let CallPlans {
            shape,
            algorithm,
            plans,
        } = self.0;
        let mut doc = s.serialize_map(Some(4))?;
        doc.serialize_entry("format", FORMAT)?;
        doc.serialize_entry("algorithm", algorithm)?;
        doc.serialize_entry("shape", &ShapeDoc(shape))?;
        doc.serialize_entry("ranks", &Each(plans, RankDoc))?;
        doc.end()
    }
}

/// Every item of a slice, each written as `wrap` makes it.
struct Each<'a, T, W>(&'a [T], fn(&'a T) -> W);

impl<'a, T, W: Serialize> Serialize for Each<'a, T, W> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            seq.serialize_element(&(self.1)(item))?;
        }
        seq.end()
    }
}

struct ShapeDoc<'a>(&'a CallShape);

impl Serialize for ShapeDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("collective", c.collective.name())?;
        m.serialize_entry("world", &c.world)?;
        m.serialize_entry("count", &c.count)?;
        m.serialize_entry("root", &c.root)?;
        m.serialize_entry("chunk", &c.chunk)?;
        m.serialize_entry("ranks_per_host", &c.ranks_per_host)?;
        m.serialize_entry("counts", &c.counts.as_deref())?;
        m.end()
    }
}

struct RankDoc<'a>(&'a Plan);

impl Serialize for RankDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let plan = self.0;
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("rank", &plan.rank)?;
        m.serialize_entry("scratch", &plan.scratch_len)?;
        m.serialize_entry("steps", &Each(&plan.steps, StepDoc))?;
        m.end()
    }
}

/// A step: `op`, the op's own fields, `deps`.
struct StepDoc<'a>(&'a Step);

impl Serialize for StepDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let step = self.0;
        let mut m = s.serialize_map(None)?;
        match &step.op {
            Op::Send { peer, tag, src } => {
                m.serialize_entry("op", "send")?;
                m.serialize_entry("peer", peer)?;
                m.serialize_entry("tag", tag)?;
                m.serialize_entry("src", &RegionDoc(src))?;
            }
            Op::Recv { peer, tag, dst } | Op::RecvReduce { peer, tag, dst } => {
                let reduce = matches!(step.op, Op::RecvReduce { .. });
                m.serialize_entry("op", if reduce { "recv_reduce" } else { "recv" })?;
                m.serialize_entry("peer", peer)?;
                m.serialize_entry("tag", tag)?;
                m.serialize_entry("dst", &RegionDoc(dst))?;
            }
            Op::Copy { src, dst } | Op::Reduce { src, dst } => {
                let reduce = matches!(step.op, Op::Reduce { .. });
                m.serialize_entry("op", if reduce { "reduce" } else { "copy" })?;
                m.serialize_entry("src", &RegionDoc(src))?;
                m.serialize_entry("dst", &RegionDoc(dst))?;
            }
            Op::Expose { flag, src, slot } => {
                m.serialize_entry("op", if *slot { "expose_slot" } else { "expose" })?;
                m.serialize_entry("flag", flag)?;
                m.serialize_entry("src", &RegionDoc(src))?;
            }
            Op::PeerRead {
                peer,
                flag,
                offset,
                dst,
            }
            | Op::PeerReadReduce {
                peer,
                flag,
                offset,
                dst,
            } => {
                let reduce = matches!(step.op, Op::PeerReadReduce { .. });
                m.serialize_entry(
                    "op",
                    if reduce {
                        "peer_read_reduce"
                    } else {
                        "peer_read"
                    },
                )?;
                m.serialize_entry("peer", peer)?;
                m.serialize_entry("flag", flag)?;
                m.serialize_entry("offset", offset)?;
                m.serialize_entry("dst", &RegionDoc(dst))?;
            }
            Op::Release { flag, reads } => {
                m.serialize_entry("op", "release")?;
                m.serialize_entry("flag", flag)?;
                m.serialize_entry("reads", reads)?;
            }
        }
        m.serialize_entry("deps", &step.deps[..])?;
        m.end()
    }
}

/// `[buffer, offset, length]`.
struct RegionDoc<'a>(&'a Region);

impl Serialize for RegionDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut t = s.serialize_tuple(3)?;
        t.serialize_element(buf_name(r.buf))?;
        t.serialize_element(&r.offset)?;
        t.serialize_element(&r.len)?;
        t.end()
    }
}

/// The documents' layout: `", "` and `": "` between items, and a line of
/// its own for each rank and each step (the arrays two and four levels
/// deep), and for the document's `shape` and `ranks`.
#[derive(Default)]
struct Layout {
    /// How many arrays and objects are open.
    depth: usize,
    /// Members of the document written so far.
    top_members: usize,
}

impl Layout {
    /// What goes before an item of an array or object that is not `first`.
    fn separator<W: io::Write + ?Sized>(
        w: &mut W,
        first: bool,
        line: Option<&str>,
    ) -> io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        match line {
            Some(indent) => w.write_all(indent.as_bytes()),
            None if first => Ok(()),
            None => w.write_all(b" "),
        }
    }
}

impl serde_json::ser::Formatter for Layout {
    fn begin_array<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth += 1;
        w.write_all(b"[")
    }

    fn end_array<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth -= 1;
        w.write_all(b"]")
    }

    fn begin_array_value<W: io::Write + ?Sized>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        let line = match self.depth {
            2 => Some("\n  "),   // a rank
            4 => Some("\n    "), // a step
            _ => None,
        };
        Layout::separator(w, first, line)
    }

    fn begin_object<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth += 1;
        w.write_all(b"{")
    }

    fn end_object<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        self.depth -= 1;
        w.write_all(b"}")
    }

    fn begin_object_key<W: io::Write + ?Sized>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        let mut line = None;
        if self.depth == 1 {
            self.top_members += 1;
            // `shape` and `ranks`, after `format` and `algorithm`.
            if self.top_members > 2 {
                line = Some("\n ");
            }
        }
        Layout::separator(w, first, line)
    }

    fn begin_object_value<W: io::Write + ?Sized>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::registry;
    use crate::Deps;

    fn shape(collective: Collective, world: usize, count: usize) -> CallShape {
        CallShape {
            collective,
            world,
            count,
            root: world - 1,
            chunk: 3,
            ranks_per_host: 1,
            counts: None,
        }
    }

    #[test]
    fn every_builtin_plan_round_trips() {
        for alg in registry() {
            let shape = shape(alg.collective, 5, 7);
            let doc = CallPlans {
                algorithm: Some(format!("{}/{}", alg.collective, alg.name)),
                plans: (0..5).map(|r| (alg.generate)(&shape, r)).collect(),
                shape,
            };
            let text = doc.to_json();
            assert_eq!(CallPlans::from_json(&text).unwrap(), doc, "{}", alg.name);
        }
    }

    #[test]
    fn the_layout_is_one_step_per_line() {
        let shape = CallShape {
            counts: Some(vec![1, 2].into()),
            ..shape(Collective::Allgather, 2, 0)
        };
        let doc = CallPlans {
            algorithm: Some("allgather/ring".into()),
            plans: vec![
                Plan {
                    rank: 0,
                    scratch_len: 0,
                    steps: vec![],
                },
                Plan {
                    rank: 1,
                    scratch_len: 2,
                    steps: vec![
                        Step {
                            op: Op::Send {
                                peer: 0,
                                tag: 3,
                                src: Region::new(Buf::Input, 0, 2),
                            },
                            deps: Deps::new(),
                        },
                        Step {
                            op: Op::Release { flag: 1, reads: 2 },
                            deps: Deps::from([0]),
                        },
                    ],
                },
            ],
            shape,
        };
        // What the hand-written writer wrote before serde: documents and
        // their digests stay the same.
        assert_eq!(
            doc.to_json(),
            r#"{"format": "shoal-plan/1", "algorithm": "allgather/ring",
 "shape": {"collective": "allgather", "world": 2, "count": 0, "root": 1, "chunk": 3, "ranks_per_host": 1, "counts": [1, 2]},
 "ranks": [
  {"rank": 0, "scratch": 0, "steps": []},
  {"rank": 1, "scratch": 2, "steps": [
    {"op": "send", "peer": 0, "tag": 3, "src": ["input", 0, 2], "deps": []},
    {"op": "release", "flag": 1, "reads": 2, "deps": [0]}]}]}
"#
        );
    }

    #[test]
    fn per_rank_counts_round_trip() {
        let shape = CallShape {
            counts: Some(vec![1, 0, 4].into()),
            ..shape(Collective::Allgather, 3, 0)
        };
        let alg = crate::algorithms::find(Collective::Allgather, "ring").unwrap();
        let doc = CallPlans {
            algorithm: None,
            plans: (0..3).map(|r| (alg.generate)(&shape, r)).collect(),
            shape,
        };
        assert_eq!(CallPlans::from_json(&doc.to_json()).unwrap(), doc);
    }

    #[test]
    fn errors_name_the_field() {
        let good = CallPlans {
            algorithm: None,
            plans: vec![(crate::algorithms::allreduce::ring::ALGORITHM.generate)(
                &shape(Collective::Allreduce, 1, 2),
                0,
            )],
            shape: shape(Collective::Allreduce, 1, 2),
        }
        .to_json();
        let err = |text: &str| CallPlans::from_json(text).unwrap_err().to_string();
        assert_eq!(
            err(&good.replace("\"copy\"", "\"cpy\"")),
            "ranks[0].steps[0].op: unknown op \"cpy\"; valid: send, recv, recv_reduce, copy, reduce, expose, expose_slot, peer_read, peer_read_reduce, release"
        );
        assert_eq!(
            err(&good.replace("\"output\"", "\"out\"")),
            "ranks[0].steps[0].dst[0]: unknown buffer \"out\"; valid: input, output, scratch"
        );
        assert_eq!(
            err(&good.replace("\"world\": 1", "\"world\": -1")),
            "shape.world: expected a non-negative integer, got -1"
        );
        assert_eq!(
            err(&good.replace("shoal-plan/1", "shoal-plan/9")),
            "format: expected \"shoal-plan/1\", got \"shoal-plan/9\""
        );
        assert!(err(&good[..good.len() - 3]).starts_with("invalid JSON at line"));
        assert!(err("[").starts_with("invalid JSON"));
        // serde_json refuses deep nesting before it could overflow the stack.
        assert!(err(&"[".repeat(1000)).contains("recursion limit exceeded"));
        assert_eq!(
            err(r#"{"format": "shoal-plan/1", "ranks": []}"#),
            "missing field \"shape\""
        );
        assert_eq!(
            err(&good.replace("\"chunk\": 3, ", "")),
            "missing field \"chunk\" in shape"
        );
        let tag = err(&ring_json(4).replacen("\"tag\": 0", "\"tag\": 4294967296", 1));
        assert!(
            tag.starts_with("ranks[0].steps[") && tag.ends_with("].tag: tags is 32-bit"),
            "{tag}"
        );
    }

    /// A document of a two-rank ring allreduce of `count` elements.
    fn ring_json(count: usize) -> String {
        let shape = shape(Collective::Allreduce, 2, count);
        let alg = crate::algorithms::find(Collective::Allreduce, "ring").unwrap();
        CallPlans {
            algorithm: None,
            plans: (0..2).map(|r| (alg.generate)(&shape, r)).collect(),
            shape,
        }
        .to_json()
    }

    #[test]
    fn scratch_past_the_limit_names_its_field() {
        let text = ring_json(4).replacen("\"scratch\": 0", "\"scratch\": 4294967296", 1);
        let limit = 4 * 8 + (1 << 20);
        assert_eq!(
            CallPlans::from_json(&text).unwrap_err().to_string(),
            format!("ranks[0].scratch: scratch of 4294967296 elements is more than the limit of {limit} for this call (4 × its 8 elements + 1048576)")
        );
    }

    #[test]
    fn sizes_past_what_a_call_can_hold_name_their_field() {
        let err = |from: &str, to: &str| {
            let text = ring_json(4);
            assert!(text.contains(from), "{from}");
            CallPlans::from_json(&text.replacen(from, to, 1))
                .unwrap_err()
                .to_string()
        };
        let count = err("\"count\": 4", "\"count\": 18446744073709551615");
        assert!(
            count.starts_with("shape.count: 2 ranks × 18446744073709551615 elements is more than"),
            "{count}"
        );
        let world = err("\"world\": 2", "\"world\": 18446744073709551615");
        assert!(world.starts_with("shape.world: "), "{world}");
        let broadcast = shape(Collective::Broadcast, 2, 4);
        let text = CallPlans {
            algorithm: None,
            plans: vec![],
            shape: CallShape {
                root: 2,
                ..broadcast
            },
        }
        .to_json();
        let root = CallPlans::from_json(&text).unwrap_err();
        assert_eq!(
            root.to_string(),
            "shape.root: 2 is not a rank of a world of 2"
        );
        assert!(matches!(
            root,
            PlanJsonError::Field {
                problem: FieldProblem::Shape(ShapeError::RootOutside { root: 2, world: 2 }),
                ..
            }
        ));
        let overflowing = CallPlans {
            algorithm: None,
            plans: vec![],
            shape: CallShape {
                counts: Some(vec![usize::MAX, 1].into()),
                ..shape(Collective::Allgather, 2, 0)
            },
        };
        let counts = CallPlans::from_json(&overflowing.to_json())
            .unwrap_err()
            .to_string();
        assert!(
            counts.starts_with("shape.counts: they add up to more than"),
            "{counts}"
        );
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_not_a_panic() {
        let shape = shape(Collective::Broadcast, 3, 5);
        let alg = crate::algorithms::find(Collective::Broadcast, "binomial").unwrap();
        let text = CallPlans {
            algorithm: None,
            plans: (0..3).map(|r| (alg.generate)(&shape, r)).collect(),
            shape,
        }
        .to_json();
        for end in 0..text.len() - 1 {
            assert!(
                CallPlans::from_json(&text[..end]).is_err(),
                "prefix of {end} bytes"
            );
        }
        for (i, c) in text.char_indices().step_by(7) {
            for junk in ["\\", "\"", "-", "9999999999999999999999", "{", "]", "\\u12"] {
                let bad = format!("{}{junk}{}", &text[..i], &text[i + c.len_utf8()..]);
                let _ = CallPlans::from_json(&bad); // must return, whatever it returns
            }
        }
    }

    #[test]
    fn strings_with_escapes_round_trip() {
        let doc = CallPlans {
            algorithm: Some("allreduce/\"odd\"\\name\u{1}é😀".into()),
            plans: vec![],
            shape: shape(Collective::Barrier, 1, 0),
        };
        assert_eq!(CallPlans::from_json(&doc.to_json()).unwrap(), doc);
        let escaped = doc.to_json().replace("😀", "\\ud83d\\ude00");
        assert_eq!(CallPlans::from_json(&escaped).unwrap(), doc);
    }
}
