//! Built-in algorithm generators, one file each, and the registry that names them.
//!
//! An algorithm is a function from a call shape and a rank to that rank's plan,
//! plus an alpha-beta-gamma cost estimate used by the selector. Each lives in
//! `<collective>/<name>.rs`; patterns several of them share (ring, butterfly,
//! binomial tree) live in [`phases`], and the [`PlanBuilder`](crate::PlanBuilder)
//! infers all dependencies, so a generator reads like the textbook description.
//!
//! To add one: write `<collective>/<name>.rs` with a `generate` driving a
//! `PlanBuilder` and a `cost` built from [`cost::Model`], export it as
//! `pub const ALGORITHM` (with the `Needs` it has beyond a count: peers'
//! memory, per-rank counts, the host layout), and list it in `REGISTRY`
//! below. The crate's tests
//! then verify it for every world size 1..=16, awkward counts, roots and
//! chunk sizes.

pub mod allgather;
pub mod allreduce;
pub mod alltoall;
pub mod barrier;
pub mod broadcast;
pub mod cost;
pub mod gather;
pub mod phases;
pub mod reduce;
pub mod reduce_scatter;
pub mod scatter;

use std::fmt;

use shoal_bootstrap::fnv;

use crate::plan::{CallShape, Collective, Plan};

/// Per-transport cost parameters (seconds), calibrated by the core.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostParams {
    /// Latency of one message.
    pub alpha: f64,
    /// Seconds per byte moved between two ranks.
    pub beta: f64,
    /// Seconds per byte reduced locally.
    pub gamma: f64,
    /// Latency of one message between ranks of one host (shared memory);
    /// `alpha`/`beta` are then those of the links between hosts.
    pub alpha_local: f64,
    /// Seconds per byte moved between two ranks of one host (a message
    /// through the shared-memory rings).
    pub beta_local: f64,
    /// Seconds per byte read straight from a peer's memory on this host
    /// (`process_vm_readv`, which pins the pages it reads): the `shm_*`
    /// algorithms' in-place reads. Its own figure, because on one host it
    /// and `beta_local` were 2x apart either way round (docs/benchmarks.md).
    pub beta_read: f64,
}

/// A named plan generator.
pub struct Algorithm {
    pub name: &'static str,
    pub collective: Collective,
    /// Builds the plan of `rank` (group-local, `< shape.world`).
    pub generate: fn(&CallShape, usize) -> Plan,
    /// Estimated time of the whole call in seconds for elements of `elem_size` bytes.
    pub cost: fn(&CallShape, usize, &CostParams) -> f64,
    /// What it needs beyond a count: the selector, the tuning tables and
    /// the verifier read these instead of guessing from the name.
    pub needs: Needs,
}

/// What an algorithm needs of the call and the machine beyond a single count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// It reads its peers' memory (see `phases::shared`): it runs only when
    /// every rank is on one host (at most [`MAX_SHARED_WORLD`]) and the
    /// transport is shared memory.
    pub peers_memory: bool,
    /// Its generator takes per-rank counts ([`CallShape::counts`]:
    /// allgatherv, reduce_scatter with counts, alltoallv) as well as a count.
    pub counts: bool,
    /// Its plans follow the host layout (`CallShape::ranks_per_host`); the
    /// others make the same plans whatever the layout.
    pub host_layout: bool,
}

impl Needs {
    /// A single count, any machine.
    pub const NOTHING: Needs = Needs {
        peers_memory: false,
        counts: false,
        host_layout: false,
    };
}

impl Algorithm {
    /// The algorithm's id in message signatures: [`algorithm_id`] of its name.
    pub const fn id(&self) -> u32 {
        algorithm_id(self.collective, self.name)
    }

    /// Whether the generator handles calls of this shape: every algorithm
    /// takes a single count, those that need them ([`Needs::counts`])
    /// per-rank counts too.
    pub fn handles(&self, shape: &CallShape) -> bool {
        self.refuses(shape).is_none()
    }

    /// Why the generator cannot make plans for `shape`, e.g. `takes no
    /// per-rank counts`; `None` when it can.
    pub fn refuses(&self, shape: &CallShape) -> Option<String> {
        let counts_ok = shape.counts.is_none() || self.needs.counts;
        if !counts_ok {
            return Some("takes no per-rank counts".into());
        }
        let shared_ok = shape.layout().0 == 1 && shape.world <= MAX_SHARED_WORLD;
        (self.reads_peers() && !shared_ok).then(|| {
            format!(
                "reads peers' memory: it needs every rank on one host (ranks_per_host = world) \
                 and at most {MAX_SHARED_WORLD} ranks"
            )
        })
    }

    /// Whether the algorithm reads its peers' memory ([`Needs::peers_memory`]).
    pub fn reads_peers(&self) -> bool {
        self.needs.peers_memory
    }
}

/// The most ranks the shared-memory algorithms serve: a rank exposes at most
/// this many flags at once (the shm transport's `EXPOSED_FLAGS`), and
/// `allreduce/shm_sharded` uses one per rank.
pub const MAX_SHARED_WORLD: usize = 16;

/// The id that names an algorithm in message signatures, so ranks that chose
/// differently are caught: FNV-1a (32-bit) over the UTF-8 bytes of
/// `"<collective>/<name>"`, e.g. `"allreduce/ring"`. A hash of the name, not
/// a position in the registry, so builds or registrations that list
/// algorithms in another order still agree (docs/architecture.md, frame header).
pub const fn algorithm_id(collective: Collective, name: &str) -> u32 {
    let h = fnv::fold_32(fnv::OFFSET_32, collective.name().as_bytes());
    let h = fnv::fold_32(h, b"/");
    fnv::fold_32(h, name.as_bytes())
}

/// The algorithm of `collective` whose [`Algorithm::id`] is `id`.
pub fn by_id(collective: Collective, id: u32) -> Option<&'static Algorithm> {
    for_collective(collective).find(|a| a.id() == id)
}

/// Every built-in algorithm.
pub fn registry() -> &'static [Algorithm] {
    REGISTRY
}

static REGISTRY: &[Algorithm] = &[
    allreduce::ring::ALGORITHM,
    allreduce::recursive_doubling::ALGORITHM,
    allreduce::rabenseifner::ALGORITHM,
    allreduce::binomial::ALGORITHM,
    allreduce::direct::ALGORITHM,
    allreduce::hierarchical::ALGORITHM,
    broadcast::binomial::ALGORITHM,
    broadcast::scatter_allgather::ALGORITHM,
    broadcast::pipelined_chain::ALGORITHM,
    broadcast::topology_aware_pipelined_chain::ALGORITHM,
    reduce::binomial::ALGORITHM,
    reduce::direct::ALGORITHM,
    allgather::ring::ALGORITHM,
    allgather::recursive_doubling::ALGORITHM,
    allgather::bruck::ALGORITHM,
    reduce_scatter::ring::ALGORITHM,
    reduce_scatter::halving::ALGORITHM,
    alltoall::pairwise::ALGORITHM,
    gather::linear::ALGORITHM,
    gather::binomial::ALGORITHM,
    scatter::linear::ALGORITHM,
    scatter::binomial::ALGORITHM,
    barrier::dissemination::ALGORITHM,
    allreduce::shm_flat::ALGORITHM,
    allreduce::shm_sharded::ALGORITHM,
    broadcast::shm_read::ALGORITHM,
    allgather::shm_read::ALGORITHM,
    reduce_scatter::shm_read::ALGORITHM,
    reduce::shm_read::ALGORITHM,
    gather::shm_read::ALGORITHM,
    scatter::shm_read::ALGORITHM,
    alltoall::shm_read::ALGORITHM,
];

/// The algorithms of one collective.
pub fn for_collective(collective: Collective) -> impl Iterator<Item = &'static Algorithm> {
    registry()
        .iter()
        .filter(move |a| a.collective == collective)
}

/// Earlier names that are still accepted wherever users name an algorithm
/// (`algorithm=`, `SHOAL_ALGO`): `(collective, old name, name)`.
pub const ALIASES: &[(Collective, &str, &str)] = &[
    (Collective::Broadcast, "pc", "pipelined_chain"),
    (
        Collective::Broadcast,
        "ta_pc",
        "topology_aware_pipelined_chain",
    ),
];

/// The name `name` stands for: itself, or the algorithm it is an alias of.
pub fn canonical_name(collective: Collective, name: &str) -> &str {
    ALIASES
        .iter()
        .find(|&&(c, alias, _)| c == collective && alias == name)
        .map_or(name, |&(_, _, canonical)| canonical)
}

/// Looks an algorithm up by name or alias; the error lists the valid names.
pub fn find(collective: Collective, name: &str) -> Result<&'static Algorithm, UnknownAlgorithm> {
    let canonical = canonical_name(collective, name);
    for_collective(collective)
        .find(|a| a.name == canonical)
        .ok_or_else(|| UnknownAlgorithm {
            collective,
            name: name.to_string(),
        })
}

/// A name [`find`] knows no algorithm of `collective` by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownAlgorithm {
    pub collective: Collective,
    pub name: String,
}

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let valid: Vec<&str> = for_collective(self.collective).map(|a| a.name).collect();
        write!(
            f,
            "unknown {} algorithm '{}'; valid: {}",
            self.collective,
            self.name,
            valid.join(", ")
        )
    }
}

impl std::error::Error for UnknownAlgorithm {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithm_ids_are_hashes_of_names_not_positions() {
        // Pinned: FNV-1a 32 of "allreduce/ring" (the wire format depends on it).
        assert_eq!(algorithm_id(Collective::Allreduce, "ring"), 0x4385_fe69);
        let ring = find(Collective::Allreduce, "ring").unwrap();
        assert_eq!(ring.id(), 0x4385_fe69);
        // An algorithm registered elsewhere (another build, a plug-in) under
        // the same name has the same id, wherever it sits in its registry.
        let elsewhere = Algorithm {
            name: "ring",
            collective: Collective::Allreduce,
            generate: allreduce::direct::ALGORITHM.generate,
            cost: allreduce::direct::ALGORITHM.cost,
            needs: Needs::NOTHING,
        };
        assert_eq!(elsewhere.id(), ring.id());
        assert_ne!(
            algorithm_id(Collective::Allgather, "ring"),
            ring.id(),
            "the collective is part of the id"
        );
        for a in registry() {
            assert_eq!(a.id(), algorithm_id(a.collective, a.name));
            assert_eq!(by_id(a.collective, a.id()).map(|b| b.name), Some(a.name));
        }
    }

    #[test]
    fn old_names_are_aliases_with_the_same_id() {
        for &(collective, alias, name) in ALIASES {
            let alg = find(collective, alias).unwrap();
            assert_eq!(alg.name, name);
            assert_eq!(alg.id(), find(collective, name).unwrap().id());
            assert!(for_collective(collective).all(|a| a.name != alias));
        }
        assert_eq!(
            find(Collective::Broadcast, "ta_pc").unwrap().name,
            "topology_aware_pipelined_chain"
        );
        // An alias belongs to its collective only.
        assert!(find(Collective::Allreduce, "pc").is_err());
    }

    #[test]
    fn algorithm_ids_are_distinct_within_a_collective() {
        for c in Collective::ALL {
            let mut ids: Vec<u32> = for_collective(c).map(|a| a.id()).collect();
            let n = ids.len();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), n, "two {c} algorithms share an id");
        }
    }
}
