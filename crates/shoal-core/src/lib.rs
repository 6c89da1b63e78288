//! shoal's runtime: configuration, rendezvous, reduction kernels, algorithm
//! selection, the plan executor and communicators.

pub mod alias;
pub mod calibrate;
pub mod comm;
pub mod config;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod ina;
pub mod init;
pub mod log;
pub mod lru;
pub mod reduce;
pub mod rendezvous;
pub mod secret;
pub mod select;
pub mod stall;
pub mod store;
pub mod work;

pub use dtype::{DType, ReduceOp};
pub use error::{Error, ErrorKind, Result};
