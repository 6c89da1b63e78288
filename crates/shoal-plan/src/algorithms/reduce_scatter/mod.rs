//! Reduce-scatter algorithms.

pub mod halving;
pub mod ring;
pub mod shm_read;
