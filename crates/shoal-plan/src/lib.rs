//! shoal's algorithm layer: the plan IR, the built-in generators and the verifier.

pub mod algorithms;
pub mod builder;
pub mod partition;
pub mod plan;
pub mod verify;

pub use algorithms::{find, registry, Algorithm, CostParams};
pub use builder::PlanBuilder;
pub use plan::{Buf, CallShape, Collective, Op, Plan, Region, Step};
