//! Built-in algorithm generators, one file each, and the registry that names them.
//!
//! An algorithm is a function from a call shape and a rank to that rank's plan,
//! plus an alpha-beta-gamma cost estimate used by the selector.

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
    &[]
}

/// The algorithms of one collective.
pub fn for_collective(collective: Collective) -> impl Iterator<Item = &'static Algorithm> {
    registry().iter().filter(move |a| a.collective == collective)
}

/// Looks an algorithm up by name; the error lists the valid names.
pub fn find(collective: Collective, name: &str) -> Result<&'static Algorithm, String> {
    for_collective(collective).find(|a| a.name == name).ok_or_else(|| {
        let valid: Vec<&str> = for_collective(collective).map(|a| a.name).collect();
        format!(
            "unknown {collective} algorithm '{name}'; valid: {}",
            valid.join(", ")
        )
    })
}
