//! Workloads: what the simulated network carries besides (and including)
//! the collectives — background flow sizes and arrivals, the training
//! models of the PANAMA evaluation, and where a job's workers sit.

pub mod background;
pub mod cdf;
pub mod models;
pub mod placement;
pub mod rng;
pub mod trace;

pub use background::{BackgroundFlow, PoissonTraffic};
pub use cdf::FlowSizeCdf;
pub use models::{Model, MODELS};
pub use placement::place_close;
pub use rng::Rng;
