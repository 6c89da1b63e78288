//! A flow trace: the user's own background traffic, replayed as it was
//! recorded. CSV with the header `start_s,src,dst,bytes` (start in
//! seconds, host ids as `flows.csv` numbers them, payload bytes), one flow
//! a line; errors name the file and line.

use std::path::Path;

use shoal_bootstrap::small_file::read_text;

use super::background::BackgroundFlow;

/// The largest trace read (a million flows is about 40 MB of CSV).
pub const MAX_TRACE_BYTES: u64 = 1 << 30;

const HEADER: &str = "start_s,src,dst,bytes";

/// Reads the trace in `path`: a regular file of at most [`MAX_TRACE_BYTES`]
/// (a FIFO or a device is refused rather than waited on).
pub fn read(path: &Path) -> Result<Vec<BackgroundFlow>, String> {
    let name = path.display();
    let text = read_text(path, MAX_TRACE_BYTES).map_err(|e| format!("{name}: {e}"))?;
    parse(&text).map_err(|e| format!("{name}:{e}"))
}

/// Parses a trace; an error starts with the line number.
pub fn parse(text: &str) -> Result<Vec<BackgroundFlow>, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    match lines.next() {
        Some((_, header)) if header.trim().replace(' ', "") == HEADER => {}
        _ => return Err(format!("1: the first line must be the header {HEADER}")),
    }
    lines
        .map(|(i, line)| flow(line).map_err(|e| format!("{}: {e}", i + 1)))
        .collect()
}

fn flow(line: &str) -> Result<BackgroundFlow, String> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    let [start, src, dst, bytes] = fields[..] else {
        return Err(format!("{line:?}: expected 4 fields ({HEADER})"));
    };
    let bad = |what: &str, v: &str| format!("{what} {v:?} is not a valid number");
    let start_s: f64 = start.parse().map_err(|_| bad("start_s", start))?;
    if !(start_s >= 0.0 && start_s.is_finite()) {
        return Err(format!("start_s {start} must be a time >= 0"));
    }
    let flow = BackgroundFlow {
        start_s,
        src: src.parse().map_err(|_| bad("src", src))?,
        dst: dst.parse().map_err(|_| bad("dst", dst))?,
        bytes: bytes.parse().map_err(|_| bad("bytes", bytes))?,
    };
    if flow.src == flow.dst {
        return Err(format!("a flow from host {} to itself", flow.src));
    }
    Ok(flow)
}

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
        assert!(parse("src,dst\n")
            .unwrap_err()
            .starts_with("1: the first line"));
        assert!(parse("start_s,src,dst,bytes\n0,1,2,3\n0,1,x,3\n")
            .unwrap_err()
            .starts_with("3: dst \"x\""));
        assert!(parse("start_s,src,dst,bytes\n0,1,1,3\n")
            .unwrap_err()
            .contains("to itself"));
        assert!(parse("start_s,src,dst,bytes\n-1,1,2,3\n")
            .unwrap_err()
            .contains(">= 0"));
    }
}
