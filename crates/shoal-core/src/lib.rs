//! shoal's runtime: configuration, reduction kernels, algorithm selection,
//! the plan executor and communicators, on top of the rendezvous of
//! `shoal-bootstrap` and the transports of `shoal-transport`.

pub mod agree;
pub mod alias;
pub mod buffers;
pub mod calibrate;
pub mod comm;
pub mod config;
pub mod dtype;
pub mod error;
pub mod exec;
mod fnv;
pub mod ina;
pub mod init;
pub mod log;
pub mod lru;
pub mod provider;
pub mod reduce;
pub mod registry;
pub mod select;
pub mod stall;
pub mod trace;
pub mod tune;
pub mod work;

/// How a job's processes meet (the job secret, the stores, launcher
/// detection and host discovery) lives in `shoal-bootstrap`; these paths
/// are kept for the runtime's own modules and the binding.
pub use shoal_bootstrap::{rendezvous, secret, store};

pub use dtype::{DType, DTypeError, ReduceOp};
pub use error::{Error, ErrorKind, Result};
