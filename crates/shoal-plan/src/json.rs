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
//! Regions are `[buffer, offset, length]` in elements. Written by hand (the
//! schema is small and fixed) so the crate keeps no dependencies, and so a
//! bad document gets an error naming the field, e.g. `ranks[1].steps[4].op`.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::plan::{Buf, CallShape, Collective, Op, Plan, Region, Step};
use crate::verify::check_scratch;

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
        let mut out = String::new();
        let s = &self.shape;
        let counts = match &s.counts {
            Some(c) => format!("[{}]", join(c.iter())),
            None => "null".into(),
        };
        let algorithm = match &self.algorithm {
            Some(a) => quote(a),
            None => "null".into(),
        };
        let _ = write!(
            out,
            "{{\"format\": {}, \"algorithm\": {algorithm},\n \"shape\": {{\"collective\": {}, \"world\": {}, \"count\": {}, \"root\": {}, \"chunk\": {}, \"ranks_per_host\": {}, \"counts\": {counts}}},\n \"ranks\": [",
            quote(FORMAT),
            quote(s.collective.name()),
            s.world,
            s.count,
            s.root,
            s.chunk,
            s.ranks_per_host,
        );
        for (i, plan) in self.plans.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(
                out,
                "{sep}\n  {{\"rank\": {}, \"scratch\": {}, \"steps\": [",
                plan.rank, plan.scratch_len
            );
            for (j, step) in plan.steps.iter().enumerate() {
                let sep = if j == 0 { "" } else { "," };
                let _ = write!(out, "{sep}\n    {}", step_json(step));
            }
            out.push_str("]}");
        }
        out.push_str("]}\n");
        out
    }

    /// Reads a document; the error names the field that is wrong.
    pub fn from_json(text: &str) -> Result<CallPlans, String> {
        let doc = Parser::new(text).document()?;
        let root = Field::root(&doc);
        let format = root.get("format")?.str()?;
        if format != FORMAT {
            return Err(format!("format: expected {FORMAT:?}, got {format:?}"));
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
            .collect::<Result<Vec<Plan>, String>>()?;
        Ok(CallPlans {
            shape,
            algorithm,
            plans,
        })
    }
}

fn step_json(step: &Step) -> String {
    let deps = join(step.deps.iter());
    let body = match &step.op {
        Op::Send { peer, tag, src } => {
            format!(
                "\"op\": \"send\", \"peer\": {peer}, \"tag\": {tag}, \"src\": {}",
                region_json(src)
            )
        }
        Op::Recv { peer, tag, dst } => {
            format!(
                "\"op\": \"recv\", \"peer\": {peer}, \"tag\": {tag}, \"dst\": {}",
                region_json(dst)
            )
        }
        Op::RecvReduce { peer, tag, dst } => format!(
            "\"op\": \"recv_reduce\", \"peer\": {peer}, \"tag\": {tag}, \"dst\": {}",
            region_json(dst)
        ),
        Op::Copy { src, dst } => format!(
            "\"op\": \"copy\", \"src\": {}, \"dst\": {}",
            region_json(src),
            region_json(dst)
        ),
        Op::Reduce { src, dst } => format!(
            "\"op\": \"reduce\", \"src\": {}, \"dst\": {}",
            region_json(src),
            region_json(dst)
        ),
        Op::Expose { flag, src, slot } => format!(
            "\"op\": \"{}\", \"flag\": {flag}, \"src\": {}",
            if *slot { "expose_slot" } else { "expose" },
            region_json(src)
        ),
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
            let kind = if matches!(step.op, Op::PeerRead { .. }) {
                "peer_read"
            } else {
                "peer_read_reduce"
            };
            format!(
                "\"op\": \"{kind}\", \"peer\": {peer}, \"flag\": {flag}, \"offset\": {offset}, \"dst\": {}",
                region_json(dst)
            )
        }
        Op::Release { flag, reads } => {
            format!("\"op\": \"release\", \"flag\": {flag}, \"reads\": {reads}")
        }
    };
    format!("{{{body}, \"deps\": [{deps}]}}")
}

fn region_json(r: &Region) -> String {
    format!("[\"{}\", {}, {}]", buf_name(r.buf), r.offset, r.len)
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

fn join<T: ToString>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_string(&mut out, s);
    out
}

/// Appends `s` as a JSON string (quoted, escaped); shared with other JSON
/// writers of the project (the traces).
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    // Names and keys rarely need escaping: copy them whole.
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn shape_from(f: &Field<'_>) -> Result<CallShape, String> {
    let name = f.get("collective")?.str()?;
    let collective = Collective::from_name(name)
        .ok_or_else(|| format!("{}.collective: unknown collective {name:?}", f.path))?;
    let counts = match f.opt("counts")? {
        None => None,
        Some(c) => Some(
            c.array()?
                .iter()
                .map(|x| x.usize())
                .collect::<Result<Arc<[usize]>, String>>()?,
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
    shape.check().map_err(|e| format!("{}.{e}", f.path))?;
    if let (Some(c), Some(want)) = (&shape.counts, shape.counts_len()) {
        if c.len() != want {
            return Err(format!(
                "{}.counts: a {collective} of world {} takes {want} counts, got {}",
                f.path,
                shape.world,
                c.len()
            ));
        }
    }
    Ok(shape)
}

fn plan_from(f: &Field<'_>, shape: &CallShape) -> Result<Plan, String> {
    let steps = f
        .get("steps")?
        .array()?
        .iter()
        .map(step_from)
        .collect::<Result<Vec<Step>, String>>()?;
    Ok(Plan {
        rank: f.get("rank")?.usize()?,
        scratch_len: scratch_from(f, shape)?,
        steps,
    })
}

/// A plan's `scratch`, within what a plan of `shape` may use.
fn scratch_from(f: &Field<'_>, shape: &CallShape) -> Result<usize, String> {
    let Some(field) = f.opt("scratch")? else {
        return Ok(0);
    };
    let scratch = field.usize()?;
    check_scratch(shape, scratch).map_err(|e| format!("{}: {e}", field.path))?;
    Ok(scratch)
}

fn step_from(f: &Field<'_>) -> Result<Step, String> {
    let kind = f.get("op")?.str()?;
    let message = |f: &Field<'_>| -> Result<(usize, u32), String> {
        let tag = f.get("tag")?;
        let t =
            u32::try_from(tag.usize()?).map_err(|_| format!("{}: tags are 32-bit", tag.path))?;
        Ok((f.get("peer")?.usize()?, t))
    };
    let op = match kind {
        "send" => {
            let (peer, tag) = message(f)?;
            Op::Send {
                peer,
                tag,
                src: region_from(&f.get("src")?)?,
            }
        }
        "recv" | "recv_reduce" => {
            let (peer, tag) = message(f)?;
            let dst = region_from(&f.get("dst")?)?;
            if kind == "recv" {
                Op::Recv { peer, tag, dst }
            } else {
                Op::RecvReduce { peer, tag, dst }
            }
        }
        "copy" | "reduce" => {
            let src = region_from(&f.get("src")?)?;
            let dst = region_from(&f.get("dst")?)?;
            if kind == "copy" {
                Op::Copy { src, dst }
            } else {
                Op::Reduce { src, dst }
            }
        }
        "expose" | "expose_slot" => Op::Expose {
            flag: u32_field(f, "flag")?,
            src: region_from(&f.get("src")?)?,
            slot: kind == "expose_slot",
        },
        "peer_read" | "peer_read_reduce" => {
            let peer = f.get("peer")?.usize()?;
            let flag = u32_field(f, "flag")?;
            let offset = f.get("offset")?.usize()?;
            let dst = region_from(&f.get("dst")?)?;
            Op::peer_read(peer, flag, offset, dst, kind == "peer_read_reduce")
        }
        "release" => Op::Release {
            flag: u32_field(f, "flag")?,
            reads: u32_field(f, "reads")?,
        },
        other => {
            return Err(format!(
                "{}.op: unknown op {other:?}; valid: send, recv, recv_reduce, copy, reduce, expose, expose_slot, peer_read, peer_read_reduce, release",
                f.path
            ))
        }
    };
    let deps = match f.opt("deps")? {
        None => Vec::new(),
        Some(d) => d
            .array()?
            .iter()
            .map(|x| x.usize())
            .collect::<Result<_, _>>()?,
    };
    Ok(Step { op, deps })
}

/// A 32-bit unsigned field (flags, read counts).
fn u32_field(f: &Field<'_>, name: &str) -> Result<u32, String> {
    let v = f.get(name)?;
    u32::try_from(v.usize()?).map_err(|_| format!("{}: {name} is 32-bit", v.path))
}

fn region_from(f: &Field<'_>) -> Result<Region, String> {
    let parts = f.array()?;
    if parts.len() != 3 {
        return Err(format!(
            "{}: a region is [buffer, offset, length], got {} items",
            f.path,
            parts.len()
        ));
    }
    let name = parts[0].str()?;
    let buf = buf_from_name(name).ok_or_else(|| {
        format!(
            "{}: unknown buffer {name:?}; valid: input, output, scratch",
            parts[0].path
        )
    })?;
    let (offset, len) = (parts[1].usize()?, parts[2].usize()?);
    if offset.checked_add(len).is_none() {
        return Err(format!("{}: the region's end overflows", f.path));
    }
    Ok(Region::new(buf, offset, len))
}

/// A parsed JSON value. Numbers keep their text: plans hold only integers,
/// and reading them as `f64` would round large ones.
#[derive(Debug)]
enum Value {
    Null,
    Bool,
    Number(String),
    Str(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

/// A value and where it sits in the document, for errors.
struct Field<'a> {
    value: &'a Value,
    path: String,
}

impl<'a> Field<'a> {
    fn root(value: &'a Value) -> Field<'a> {
        Field {
            value,
            path: "document".into(),
        }
    }

    /// Member `key` of an object, `None` when absent or null.
    fn opt(&self, key: &str) -> Result<Option<Field<'a>>, String> {
        let Value::Object(members) = self.value else {
            return Err(format!("{}: expected an object", self.path));
        };
        let path = if self.path == "document" {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        };
        Ok(members
            .iter()
            .find(|(k, _)| k == key)
            .filter(|(_, v)| !matches!(v, Value::Null))
            .map(|(_, value)| Field { value, path }))
    }

    fn get(&self, key: &str) -> Result<Field<'a>, String> {
        self.opt(key)?.ok_or_else(|| {
            let at = if self.path == "document" {
                String::new()
            } else {
                format!(" in {}", self.path)
            };
            format!("missing field {key:?}{at}")
        })
    }

    fn array(&self) -> Result<Vec<Field<'a>>, String> {
        let Value::Array(items) = self.value else {
            return Err(format!("{}: expected an array", self.path));
        };
        Ok(items
            .iter()
            .enumerate()
            .map(|(i, value)| Field {
                value,
                path: format!("{}[{i}]", self.path),
            })
            .collect())
    }

    fn str(&self) -> Result<&'a str, String> {
        match self.value {
            Value::Str(s) => Ok(s),
            _ => Err(format!("{}: expected a string", self.path)),
        }
    }

    fn usize(&self) -> Result<usize, String> {
        match self.value {
            Value::Number(text) => text
                .parse()
                .map_err(|_| format!("{}: expected a non-negative integer, got {text}", self.path)),
            _ => Err(format!("{}: expected a non-negative integer", self.path)),
        }
    }
}

/// A small recursive-descent JSON parser (RFC 8259).
struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
}

/// Nesting deeper than this is no plan document; refusing it keeps a
/// hostile document from overflowing the stack.
const MAX_DEPTH: usize = 64;

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Parser<'a> {
        Parser {
            text: text.as_bytes(),
            pos: 0,
        }
    }

    fn document(mut self) -> Result<Value, String> {
        let v = self.value(0)?;
        self.skip_ws();
        if self.pos != self.text.len() {
            return Err(self.error("unexpected text after the document"));
        }
        Ok(v)
    }

    fn error(&self, what: &str) -> String {
        let line = self.text[..self.pos]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        format!("invalid JSON at line {line} (byte {}): {what}", self.pos)
    }

    fn skip_ws(&mut self) {
        while self
            .text
            .get(self.pos)
            .is_some_and(|b| b" \t\r\n".contains(b))
        {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.text.get(self.pos).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected '{}'", byte as char)))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => self.literal(),
            None => Err(self.error("unexpected end")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, String> {
        self.expect(b'{')?;
        let mut members = Vec::new();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name"));
            }
            let key = self.string()?;
            self.expect(b':')?;
            members.push((key, self.value(depth + 1)?));
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(members));
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, String> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.text.get(self.pos) else {
                return Err(self.error("unterminated string"));
            };
            self.pos += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.text.get(self.pos) else {
                        return Err(self.error("unterminated string"));
                    };
                    self.pos += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'u' => {
                            let c = self.unicode_escape()?;
                            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                        }
                        _ => return Err(self.error("bad escape")),
                    }
                }
                _ => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| self.error("string is not UTF-8"))
    }

    /// The character of a `\uXXXX` escape (the `\u` already read); a
    /// surrogate pair takes two escapes.
    fn unicode_escape(&mut self) -> Result<char, String> {
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if self.text.get(self.pos..self.pos + 2) != Some(b"\\u") {
                return Err(self.error("unpaired surrogate"));
            }
            self.pos += 2;
            let lo = self.hex4()?;
            0x10000 + ((hi - 0xD800) << 10) + (lo.wrapping_sub(0xDC00) & 0x3FF)
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| self.error("bad \\u escape"))
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .text
            .get(self.pos..self.pos + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .ok_or_else(|| self.error("bad \\u escape"))?;
        self.pos += 4;
        Ok(digits)
    }

    fn number(&mut self) -> Result<Value, String> {
        let start = self.pos;
        while self
            .text
            .get(self.pos)
            .is_some_and(|b| b"+-.eE0123456789".contains(b))
        {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.text[start..self.pos]).unwrap_or_default();
        if text.parse::<f64>().is_err() {
            return Err(self.error(&format!("bad number {text:?}")));
        }
        Ok(Value::Number(text.to_string()))
    }

    fn literal(&mut self) -> Result<Value, String> {
        for (word, value) in [
            ("null", Value::Null),
            ("true", Value::Bool),
            ("false", Value::Bool),
        ] {
            if self.text[self.pos..].starts_with(word.as_bytes()) {
                self.pos += word.len();
                return Ok(value);
            }
        }
        Err(self.error("unexpected character"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::registry;

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
        let err = |text: &str| CallPlans::from_json(text).unwrap_err();
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
        assert!(err(&"[".repeat(1000)).contains("nested too deeply"));
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
            CallPlans::from_json(&text).unwrap_err(),
            format!("ranks[0].scratch: scratch of 4294967296 elements is more than the limit of {limit} for this call (4 × its 8 elements + 1048576)")
        );
    }

    #[test]
    fn sizes_past_what_a_call_can_hold_name_their_field() {
        let err = |from: &str, to: &str| {
            let text = ring_json(4);
            assert!(text.contains(from), "{from}");
            CallPlans::from_json(&text.replacen(from, to, 1)).unwrap_err()
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
        assert_eq!(
            CallPlans::from_json(&text).unwrap_err(),
            "shape.root: 2 is not a rank of a world of 2"
        );
        let overflowing = CallPlans {
            algorithm: None,
            plans: vec![],
            shape: CallShape {
                counts: Some(vec![usize::MAX, 1].into()),
                ..shape(Collective::Allgather, 2, 0)
            },
        };
        let counts = CallPlans::from_json(&overflowing.to_json()).unwrap_err();
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
