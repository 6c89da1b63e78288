//! Broadcast algorithms.

pub mod binomial;
pub mod pipelined_chain;
pub mod scatter_allgather;
pub mod shm_read;
pub mod topology_aware_pipelined_chain;
