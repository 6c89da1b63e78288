//! Reduce algorithms.

pub mod binomial;
pub mod direct;
pub mod shm_read;
