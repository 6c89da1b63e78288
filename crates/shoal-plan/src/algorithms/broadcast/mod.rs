//! Broadcast algorithms.

pub mod binomial;
pub mod pc;
pub mod scatter_allgather;
pub mod ta_pc;
