//! Scatter algorithms.

pub mod binomial;
pub mod linear;
pub mod shm_read;
