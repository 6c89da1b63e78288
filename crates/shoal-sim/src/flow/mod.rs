//! The flow-level engine: max-min fair bandwidth sharing with incremental
//! (per-component) rate updates, for sweeps too large for packets.

pub mod engine;
pub mod maxmin;

pub use engine::{Event, FlowEngine, FlowId};
