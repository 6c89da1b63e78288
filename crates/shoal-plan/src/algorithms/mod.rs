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
//! `pub const ALGORITHM`, and list it in `REGISTRY` below. The crate's tests
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
    /// Seconds per byte moved between two ranks of one host.
    pub beta_local: f64,
}

/// A named plan generator.
pub struct Algorithm {
    pub name: &'static str,
    pub collective: Collective,
    /// Builds the plan of `rank` (group-local, `< shape.world`).
    pub generate: fn(&CallShape, usize) -> Plan,
    /// Estimated time of the whole call in seconds for elements of `elem_size` bytes.
    pub cost: fn(&CallShape, usize, &CostParams) -> f64,
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
    broadcast::pc::ALGORITHM,
    broadcast::ta_pc::ALGORITHM,
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
];

/// The algorithms of one collective.
pub fn for_collective(collective: Collective) -> impl Iterator<Item = &'static Algorithm> {
    registry()
        .iter()
        .filter(move |a| a.collective == collective)
}

/// Looks an algorithm up by name; the error lists the valid names.
pub fn find(collective: Collective, name: &str) -> Result<&'static Algorithm, String> {
    for_collective(collective)
        .find(|a| a.name == name)
        .ok_or_else(|| {
            let valid: Vec<&str> = for_collective(collective).map(|a| a.name).collect();
            format!(
                "unknown {collective} algorithm '{name}'; valid: {}",
                valid.join(", ")
            )
        })
}
