//! shoal's algorithm layer: the plan IR, the built-in generators and the verifier.
//!
//! - [`plan`]: the IR — per-rank steps over buffer regions, with dependencies;
//! - [`builder`]: writes plans from program-order operations, inferring the
//!   dependencies and splitting transfers into pipelined pieces;
//! - [`partition`]: block, piece, rotation and power-of-two-fold arithmetic;
//! - [`algorithms`]: the built-in generators, one file each, and their costs;
//! - [`json`]: plans of all ranks of a call to and from JSON;
//! - [`verify`]: checks the plans of all ranks by symbolic execution.

pub mod algorithms;
pub mod builder;
pub mod deps;
pub mod json;
pub mod partition;
pub mod plan;
pub mod verify;

pub use algorithms::{find, registry, Algorithm, CostParams};
pub use builder::PlanBuilder;
pub use deps::Deps;
pub use json::CallPlans;
pub use plan::{Buf, CallShape, Collective, Op, Plan, Region, Step};
pub use verify::{verify_plans, VerifyError};
