//! Allgather algorithms.

pub mod bruck;
pub mod recursive_doubling;
pub mod ring;
pub mod shm_read;
