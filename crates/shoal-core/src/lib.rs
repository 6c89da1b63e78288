//! shoal's runtime.

pub mod store;
pub mod rendezvous;
