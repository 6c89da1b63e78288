//! The flow-level engine: max-min fair bandwidth sharing with incremental
//! (per-component) rate updates, for sweeps too large for packets.
//!
//! - [`maxmin`]: water-filling over one component;
//! - [`engine`]: flows, events, and the incremental recomputation;
//! - [`queue`]: the event queue (a radix heap on time);
//! - [`network`]: link capacities and routes from a [`crate::topology::Topology`];
//! - [`collective`]: a collective's message DAG run on the engine.

pub mod collective;
pub mod engine;
pub mod maxmin;
pub mod network;
pub mod queue;

pub use collective::{plan_outcome, simulate, CollectiveRun};
pub use engine::{Event, FlowEngine, FlowError, FlowId};
