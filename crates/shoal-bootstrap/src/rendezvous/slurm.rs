//! Slurm's own grammars and variables: host lists (`node[01-03,07]`),
//! tasks-per-node lists (`2(x3),1`), and the master port and node layout
//! they give a job step.

use std::fmt;

use super::launcher::num;
use super::{nonempty, Env};
use crate::{Error, Result};

/// What is wrong in a Slurm host list or tasks-per-node list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListSyntax {
    /// `2(x3` in a tasks-per-node list.
    UnclosedParen(String),
    /// `2(xa)`: the repeat count is not a number.
    BadRepeat(String),
    /// A task count that is not a number.
    BadCount(String),
    /// `]` before `[`, or `[` inside brackets, in a host list.
    UnbalancedBrackets,
    UnclosedBracket,
    /// `a-b`, or a range that runs backwards or spans over 100000 hosts.
    BadRange(String),
}

impl fmt::Display for ListSyntax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListSyntax::UnclosedParen(part) => write!(f, "unclosed '(' in {part:?}"),
            ListSyntax::BadRepeat(part) => write!(f, "bad repeat count in {part:?}"),
            ListSyntax::BadCount(count) => write!(f, "bad task count {count:?}"),
            ListSyntax::UnbalancedBrackets => f.write_str("unbalanced or nested brackets"),
            ListSyntax::UnclosedBracket => f.write_str("unclosed '['"),
            ListSyntax::BadRange(item) => write!(f, "bad range {item:?}"),
        }
    }
}

impl std::error::Error for ListSyntax {}

type Parsed<T> = std::result::Result<T, ListSyntax>;

/// A master port derived from the Slurm job id, in 20000..30000, so that two
/// jobs whose first node is the same pick different ports.
pub(super) fn slurm_port(job_id: usize) -> u16 {
    20000 + (job_id % 10000) as u16
}

/// Tasks on this node: `SLURM_NTASKS_PER_NODE` when given, else this node's
/// entry (`SLURM_NODEID`) of the step's or job's tasks-per-node list.
pub(super) fn slurm_local_world(env: Env) -> Result<Option<usize>> {
    if let Some(n) = num(env, "SLURM_NTASKS_PER_NODE")? {
        return Ok(Some(n));
    }
    for var in ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"] {
        if let Some(list) = nonempty(env, var) {
            let counts = parse_tasks_per_node(&list).map_err(|why| {
                Error::bad(var, &list, format!("is not a tasks-per-node list: {why}"))
            })?;
            return pick_node_count(env, var, &counts);
        }
    }
    Ok(None)
}

/// This node's task count from a per-node list: indexed by `SLURM_NODEID`,
/// or the common value when every node runs the same number.
fn pick_node_count(env: Env, var: &str, counts: &[usize]) -> Result<Option<usize>> {
    match num(env, "SLURM_NODEID")? {
        Some(node) => counts.get(node).copied().map(Some).ok_or_else(|| {
            let why = format!("is beyond the {} nodes of {var}", counts.len());
            Error::bad("SLURM_NODEID", node, why)
        }),
        None if counts.windows(2).all(|w| w[0] == w[1]) => Ok(counts.first().copied()),
        None => Ok(None),
    }
}

/// Expands Slurm's tasks-per-node syntax: `"2(x3),1"` -> `[2, 2, 2, 1]`.
pub fn parse_tasks_per_node(s: &str) -> Parsed<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let (count, times) = match part.split_once("(x") {
            Some((c, rest)) => {
                let t = rest
                    .strip_suffix(')')
                    .ok_or_else(|| ListSyntax::UnclosedParen(part.to_string()))?;
                (
                    c,
                    t.parse::<usize>()
                        .map_err(|_| ListSyntax::BadRepeat(part.to_string()))?,
                )
            }
            None => (part, 1),
        };
        let count = count
            .parse::<usize>()
            .map_err(|_| ListSyntax::BadCount(count.to_string()))?;
        out.extend(std::iter::repeat_n(count, times));
    }
    Ok(out)
}

/// The first host of the step's node list (where srun puts rank 0), else of
/// the job's.
pub(super) fn slurm_first_host(env: Env) -> Result<Option<String>> {
    for var in [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ] {
        if let Some(list) = nonempty(env, var) {
            let hosts = expand_nodelist(&list)
                .map_err(|why| Error::bad(var, &list, format!("is not a node list: {why}")))?;
            return Ok(hosts.into_iter().next());
        }
    }
    Ok(None)
}

/// Expands a Slurm host list: `"node[01-03,07],gpu1"` ->
/// `node01 node02 node03 node07 gpu1`. Zero padding follows the range's
/// lower bound; several bracket groups in one name are expanded too.
pub fn expand_nodelist(s: &str) -> Parsed<Vec<String>> {
    let mut hosts = Vec::new();
    for name in split_top_level(s)? {
        hosts.extend(expand_name(name)?);
    }
    Ok(hosts)
}

/// Splits at commas that are not inside brackets.
fn split_top_level(s: &str) -> Parsed<Vec<&str>> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(ListSyntax::UnbalancedBrackets);
        }
    }
    if depth != 0 {
        return Err(ListSyntax::UnclosedBracket);
    }
    parts.push(&s[start..]);
    Ok(parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect())
}

/// Expands one host name with zero or more bracket groups.
fn expand_name(name: &str) -> Parsed<Vec<String>> {
    let Some(open) = name.find('[') else {
        return Ok(vec![name.to_string()]);
    };
    let close = open + name[open..].find(']').ok_or(ListSyntax::UnclosedBracket)?;
    let (prefix, ranges, rest) = (&name[..open], &name[open + 1..close], &name[close + 1..]);
    let tails = expand_name(rest)?;
    let mut out = Vec::new();
    for item in ranges.split(',') {
        for n in expand_range(item.trim())? {
            out.extend(tails.iter().map(|t| format!("{prefix}{n}{t}")));
        }
    }
    Ok(out)
}

/// `"01-03"` -> `["01", "02", "03"]`; `"7"` -> `["7"]`.
fn expand_range(item: &str) -> Parsed<Vec<String>> {
    let bad = || ListSyntax::BadRange(item.to_string());
    let (lo, hi) = item.split_once('-').unwrap_or((item, item));
    let width = lo.len();
    let lo_n: u64 = lo.parse().map_err(|_| bad())?;
    let hi_n: u64 = hi.parse().map_err(|_| bad())?;
    if hi_n < lo_n || hi_n - lo_n > 100_000 {
        return Err(bad());
    }
    Ok((lo_n..=hi_n).map(|n| format!("{n:0width$}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodelist_expansion() {
        let ex = |s| expand_nodelist(s).unwrap();
        assert_eq!(
            ex("node[01-04,07]"),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(ex("a1,b[9-10],c"), ["a1", "b9", "b10", "c"]);
        assert_eq!(ex("r[1-2]n[1-2]"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(ex("x[5]-ib"), ["x5-ib"]);
        for bad in ["n[1-", "n]1[", "n[a-b]", "n[3-1]", "n[[1]]"] {
            assert!(expand_nodelist(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(
            parse_tasks_per_node("2(x3"),
            Err(ListSyntax::UnclosedParen("2(x3".into()))
        );
        assert_eq!(expand_nodelist("n[1-"), Err(ListSyntax::UnclosedBracket));
        assert!(parse_tasks_per_node("x").is_err());
    }
}
