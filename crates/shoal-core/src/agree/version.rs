//! The build every rank runs, agreed at init: two builds whose built-in
//! algorithms make different plans would each pass its own checks and
//! exchange messages that do not fit together, and a message names an
//! algorithm only by a hash of its name.
//!
//! The record is the crate version and a digest of every built-in
//! algorithm's plans (all ranks, as the plan JSON documents) at a few small
//! canonical shapes: a few milliseconds, once per process.

use std::sync::OnceLock;

use shoal_plan::{algorithms, CallPlans, CallShape};

use super::{groups, ranks_text};
use crate::error::{Error, Result};
use crate::fnv::Fnv64;

/// Bytes of the version text in a record (a longer one is cut).
const VERSION_BYTES: usize = 32;
/// Bytes of one rank's record: the version text, then the digest.
pub const RECORD: usize = VERSION_BYTES + 8;

/// What a rank runs: the crate version and its built-in algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Build<'a> {
    pub version: &'a str,
    /// [`builtins_digest`] of the build.
    pub builtins: u64,
}

impl std::fmt::Display for Build<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "shoal {} (built-in algorithms {:016x})",
            self.version, self.builtins
        )
    }
}

impl Build<'static> {
    /// This process's build (the digest is computed once).
    pub fn this() -> Build<'static> {
        static DIGEST: OnceLock<u64> = OnceLock::new();
        Build {
            version: env!("CARGO_PKG_VERSION"),
            builtins: *DIGEST.get_or_init(builtins_digest),
        }
    }
}

impl<'a> Build<'a> {
    pub fn record(&self) -> [u8; RECORD] {
        let mut r = [0u8; RECORD];
        let text = self.version.as_bytes();
        let n = text.len().min(VERSION_BYTES);
        r[..n].copy_from_slice(&text[..n]);
        r[VERSION_BYTES..].copy_from_slice(&self.builtins.to_le_bytes());
        r
    }

    fn from_record(r: &'a [u8]) -> Build<'a> {
        let text = &r[..VERSION_BYTES];
        let end = text.iter().position(|&b| b == 0).unwrap_or(VERSION_BYTES);
        Build {
            version: std::str::from_utf8(&text[..end]).unwrap_or("?"),
            builtins: u64::from_le_bytes(r[VERSION_BYTES..RECORD].try_into().unwrap()),
        }
    }
}

/// The verdict on every rank's record (`all`, in group order; `members`
/// their global ranks): `Ok` when all run one build, else an error naming
/// the ranks of each build.
pub fn compare(all: &[u8], members: &[usize]) -> Result<()> {
    let builds = groups(all, RECORD, Build::from_record);
    if builds.len() == 1 {
        return Ok(());
    }
    let each: Vec<String> = builds
        .iter()
        .map(|(build, ranks)| format!("{} run {build}", ranks_text(ranks, members)))
        .collect();
    Err(Error::runtime(format!(
        "the ranks run different builds of shoal: {}; every rank must run the same build \
         (their built-in algorithms would exchange messages that do not fit together)",
        each.join(", ")
    )))
}

/// A digest of every built-in algorithm's plans for every rank at the
/// shapes of [`canonical_shapes`] (those it takes), as plan documents.
pub fn builtins_digest() -> u64 {
    let mut h = Fnv64::new();
    for alg in algorithms::registry() {
        h.write(alg.collective.name().as_bytes());
        h.write(alg.name.as_bytes());
        for shape in canonical_shapes(alg.collective) {
            if alg.refuses(&shape).is_some() {
                continue;
            }
            let plans = (0..shape.world)
                .map(|r| (alg.generate)(&shape, r))
                .collect();
            let doc = CallPlans {
                shape,
                algorithm: None,
                plans,
            };
            h.write(doc.to_json().as_bytes());
        }
    }
    h.finish()
}

/// Small shapes that take every algorithm through its cases: 2 ranks on
/// hosts of their own, 3 on one host (the shared-memory algorithms), 4 on
/// two hosts of two (the hierarchical ones); a count that divides unevenly
/// into chunks, a root other than 0, and per-rank counts with an empty block.
fn canonical_shapes(collective: shoal_plan::Collective) -> Vec<CallShape> {
    let mut shapes = Vec::new();
    for (world, ranks_per_host) in [(2, 1), (3, 3), (4, 2)] {
        let shape = CallShape {
            root: if collective.rooted() { 1 } else { 0 },
            ranks_per_host,
            ..CallShape::new(collective, world, 5, 2)
        };
        if let Some(n) = shape.counts_len() {
            let counts = (0..n).map(|i| i % 3).collect();
            shapes.push(CallShape {
                counts: Some(counts),
                ..shape.clone()
            });
        }
        shapes.push(shape);
    }
    shapes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(builds: &[Build<'_>]) -> Vec<u8> {
        builds.iter().flat_map(|b| b.record()).collect()
    }

    #[test]
    fn one_build_everywhere_agrees() {
        let this = Build::this();
        let record = this.record();
        assert_eq!(Build::from_record(&record), this);
        compare(&records(&[this, this, this]), &[0, 1, 2]).unwrap();
    }

    #[test]
    fn different_builds_name_the_ranks_and_both_versions() {
        let a = Build {
            version: "0.1.0",
            builtins: 0x1234,
        };
        let b = Build {
            version: "0.2.0-dev",
            builtins: 0xabcd,
        };
        let e = compare(&records(&[a, b, a, b]), &[0, 1, 2, 3]).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Runtime);
        assert!(
            e.message.starts_with(
                "the ranks run different builds of shoal: ranks [0, 2] run shoal 0.1.0 \
             (built-in algorithms 0000000000001234), ranks [1, 3] run shoal 0.2.0-dev \
             (built-in algorithms 000000000000abcd); every rank must run the same build"
            ),
            "{}",
            e.message
        );
        // The same version with other built-ins (a modified build) differs too,
        // and global ranks are named in a sub-group.
        let c = Build { builtins: 1, ..a };
        let e = compare(&records(&[a, c]), &[5, 7]).unwrap_err();
        assert!(e.message.contains("ranks [5] run shoal 0.1.0 (built-in algorithms 0000000000001234), ranks [7] run shoal 0.1.0 (built-in algorithms 0000000000000001)"), "{}", e.message);
    }

    #[test]
    fn a_long_version_is_cut_not_refused() {
        let long = "1.2.3-a-very-long-pre-release-tag-beyond-thirty-two-bytes";
        let b = Build {
            version: long,
            builtins: 7,
        };
        let record = b.record();
        let back = Build::from_record(&record);
        assert_eq!((back.version, back.builtins), (&long[..VERSION_BYTES], 7));
    }

    #[test]
    fn the_digest_covers_every_algorithm_and_is_cheap() {
        let start = std::time::Instant::now();
        let d = builtins_digest();
        let took = start.elapsed();
        assert_eq!(d, builtins_digest());
        for alg in algorithms::registry() {
            let taken = canonical_shapes(alg.collective)
                .iter()
                .filter(|s| alg.refuses(s).is_none())
                .count();
            assert!(
                taken > 0,
                "{}/{} takes no canonical shape",
                alg.collective,
                alg.name
            );
        }
        eprintln!("built-in algorithms digest {d:016x} in {took:?}");
        assert!(took.as_millis() < 2_000, "{took:?}");
    }
}
