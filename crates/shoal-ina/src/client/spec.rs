//! The `SHOAL_SWITCH` syntax: the job's aggregation trees.
//!
//! ```text
//! SHOAL_SWITCH = TREE[,TREE...]          one aggregation tree each
//! TREE         = SWITCH[/SWITCH=RANKS...] a root, and leaves below it
//! RANKS        = N or N-M, joined by +   the ranks a leaf serves
//! ```
//!
//! `10.0.0.9:9800` is a flat tree; `10.0.0.9:9800/10.0.0.1:9800=0-3/10.0.0.2:9800=4-7`
//! a two-level tree whose leaves (`shoal switch --parent 10.0.0.9:9800`)
//! each serve four ranks and send their partial sums to the root. Chunks
//! are spread over the trees round-robin, so naming one switch twice gives
//! a job two switch jobs, which a multi-threaded switch serves on two cores.

use std::net::{SocketAddr, ToSocketAddrs};

use super::{config, LeafSpec, TreeSpec};
use crate::InaError;

const VAR: &str = "SHOAL_SWITCH";

/// Parses `SHOAL_SWITCH`; names are resolved here, and one that does not
/// resolve is `Unreachable` (a reason to fall back), a malformed value a
/// `Config` error naming the variable.
pub fn switch_trees(value: &str) -> Result<Vec<TreeSpec>, InaError> {
    value.split(',').map(|t| tree(value, t.trim())).collect()
}

fn tree(value: &str, text: &str) -> Result<TreeSpec, InaError> {
    let mut parts = text.split('/');
    let root = switch(value, parts.next().unwrap_or_default())?;
    let leaves = parts
        .map(|leaf| {
            let (addr, ranks) = leaf.split_once('=').ok_or_else(|| {
                config(VAR, value, &format!("leaf {leaf:?} is not host:port=RANKS"))
            })?;
            Ok(LeafSpec {
                control: switch(value, addr)?,
                ranks: rank_list(value, ranks)?,
            })
        })
        .collect::<Result<Vec<_>, InaError>>()?;
    Ok(TreeSpec { root, leaves })
}

fn switch(value: &str, s: &str) -> Result<SocketAddr, InaError> {
    let s = s.trim();
    if s.rsplit_once(':')
        .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    {
        return Err(config(VAR, value, &format!("{s:?} is not host:port")));
    }
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| InaError::Unreachable(format!("{VAR}: cannot resolve {s:?}")))
}

/// `0-3+6+8-9` -> [0, 1, 2, 3, 6, 8, 9]. Whether the leaves cover every
/// rank once is checked at admission, when the world size is known.
fn rank_list(value: &str, text: &str) -> Result<Vec<usize>, InaError> {
    let bad = || {
        config(
            VAR,
            value,
            &format!("{text:?} is not a rank list such as 0-3+6"),
        )
    };
    let mut ranks = Vec::new();
    for part in text.split('+') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi): (usize, usize) = (
            lo.trim().parse().map_err(|_| bad())?,
            hi.trim().parse().map_err(|_| bad())?,
        );
        if lo > hi || hi - lo >= 1 << 16 {
            return Err(bad());
        }
        ranks.extend(lo..=hi);
    }
    Ok(ranks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn flat_trees_and_two_level_trees() {
        let trees =
            switch_trees("127.0.0.1:9800, 127.0.0.1:9800/127.0.0.2:9801=0-1+4/127.0.0.3:9802=2-3")
                .unwrap();
        assert_eq!(trees[0], TreeSpec::flat(addr("127.0.0.1:9800")));
        assert_eq!(trees[1].root, addr("127.0.0.1:9800"));
        assert_eq!(
            trees[1].leaves,
            vec![
                LeafSpec {
                    control: addr("127.0.0.2:9801"),
                    ranks: vec![0, 1, 4],
                },
                LeafSpec {
                    control: addr("127.0.0.3:9802"),
                    ranks: vec![2, 3],
                },
            ]
        );
    }

    #[test]
    fn malformed_values_name_the_variable() {
        for bad in [
            "",
            "host",
            "127.0.0.1:9800/127.0.0.2:9801",
            "127.0.0.1:9800/127.0.0.2:9801=",
            "127.0.0.1:9800/127.0.0.2:9801=3-1",
            "127.0.0.1:9800/127.0.0.2:9801=a",
            "127.0.0.1:9800/:9801=0",
        ] {
            match switch_trees(bad) {
                Err(InaError::Config(m)) => assert!(m.contains("SHOAL_SWITCH"), "{bad}: {m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
