//! A flow trace: the user's own background traffic, replayed as it was
//! recorded. CSV with the header `start_s,src,dst,bytes` (start in
//! seconds, host ids as `flows.csv` numbers them, payload bytes), one flow
//! a line; errors name the file and line.

use std::fmt;
use std::io;
use std::path::Path;

use shoal_bootstrap::small_file::read_text;

use super::background::BackgroundFlow;

/// The largest trace read (a million flows is about 40 MB of CSV).
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

const HEADER: &str = "start_s,src,dst,bytes";

/// Reads the trace in `path`: a regular file of at most [`MAX_TRACE_BYTES`]
/// (a FIFO or a device is refused rather than waited on).
pub fn read(path: &Path) -> Result<Vec<BackgroundFlow>, TraceError> {
    let file = path.display().to_string();
    match read_text(path, MAX_TRACE_BYTES) {
        Err(error) => Err(TraceError::Read { file, error }),
        Ok(text) => parse(&text).map_err(|error| TraceError::Line { file, error }),
    }
}

/// Parses a trace; an error names the line.
pub fn parse(text: &str) -> Result<Vec<BackgroundFlow>, LineError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    match lines.next() {
        Some((_, header)) if header.trim().replace(' ', "") == HEADER => {}
        _ => {
            return Err(LineError {
                line: 1,
                problem: LineProblem::NoHeader,
            })
        }
    }
    lines
        .map(|(i, line)| {
            flow(line).map_err(|problem| LineError {
                line: i + 1,
                problem,
            })
        })
        .collect()
}

fn flow(line: &str) -> Result<BackgroundFlow, LineProblem> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    let [start, src, dst, bytes] = fields[..] else {
        return Err(LineProblem::FieldCount(line.to_string()));
    };
    let bad = |column: &'static str, v: &str| LineProblem::NotANumber {
        column,
        value: v.to_string(),
    };
    let start_s: f64 = start.parse().map_err(|_| bad("start_s", start))?;
    if !(start_s >= 0.0 && start_s.is_finite()) {
        return Err(LineProblem::BadStart(start.to_string()));
    }
    let flow = BackgroundFlow {
        start_s,
        src: src.parse().map_err(|_| bad("src", src))?,
        dst: dst.parse().map_err(|_| bad("dst", dst))?,
        bytes: bytes.parse().map_err(|_| bad("bytes", bytes))?,
    };
    if flow.src == flow.dst {
        return Err(LineProblem::ToItself(flow.src));
    }
    Ok(flow)
}

/// A trace that cannot be replayed, naming the file.
#[derive(Debug)]
pub enum TraceError {
    /// The file cannot be read (missing, not a regular file, too large).
    Read { file: String, error: io::Error },
    /// A line of the file that is not a flow.
    Line { file: String, error: LineError },
}

/// A line of a trace that is not a flow, by its number (from 1).
#[derive(Clone, Debug, PartialEq)]
pub struct LineError {
    pub line: usize,
    pub problem: LineProblem,
}

/// What is wrong with a line of a trace.
#[derive(Clone, Debug, PartialEq)]
pub enum LineProblem {
    /// The first line is not the header.
    NoHeader,
    /// A line without exactly four fields.
    FieldCount(String),
    /// A field that does not parse as its column's number.
    NotANumber { column: &'static str, value: String },
    /// A start that is negative or not finite.
    BadStart(String),
    /// A flow whose source is its destination.
    ToItself(u32),
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Read { file, error } => write!(f, "{file}: {error}"),
            TraceError::Line { file, error } => write!(f, "{file}:{error}"),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Read { error, .. } => Some(error),
            TraceError::Line { error, .. } => Some(error),
        }
    }
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.line)?;
        match &self.problem {
            LineProblem::NoHeader => write!(f, "the first line must be the header {HEADER}"),
            LineProblem::FieldCount(line) => {
                write!(f, "{line:?}: expected 4 fields ({HEADER})")
            }
            LineProblem::NotANumber { column, value } => {
                write!(f, "{column} {value:?} is not a valid number")
            }
            LineProblem::BadStart(start) => write!(f, "start_s {start} must be a time >= 0"),
            LineProblem::ToItself(host) => write!(f, "a flow from host {host} to itself"),
        }
    }
}

impl std::error::Error for LineError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_read_and_its_errors_name_the_line() {
        let flows = parse("start_s,src,dst,bytes\n0.5, 1, 2, 1000\n\n1e-3,2,0,5\n").unwrap();
        assert_eq!(flows.len(), 2);
        assert_eq!(
            (flows[0].start_s, flows[0].src, flows[0].bytes),
            (0.5, 1, 1000)
        );
        assert_eq!(flows[1].start_s, 1e-3);
        let err = parse("src,dst\n").unwrap_err();
        assert_eq!(err.problem, LineProblem::NoHeader);
        assert!(err.to_string().starts_with("1: the first line"));
        let err = parse("start_s,src,dst,bytes\n0,1,2,3\n0,1,x,3\n").unwrap_err();
        assert_eq!(
            err,
            LineError {
                line: 3,
                problem: LineProblem::NotANumber {
                    column: "dst",
                    value: "x".into()
                }
            }
        );
        assert_eq!(err.to_string(), "3: dst \"x\" is not a valid number");
        let err = parse("start_s,src,dst,bytes\n0,1,1,3\n").unwrap_err();
        assert_eq!(err.problem, LineProblem::ToItself(1));
        assert_eq!(err.to_string(), "2: a flow from host 1 to itself");
        let err = parse("start_s,src,dst,bytes\n-1,1,2,3\n").unwrap_err();
        assert_eq!(err.problem, LineProblem::BadStart("-1".into()));
        assert!(err.to_string().contains(">= 0"));
    }
}
