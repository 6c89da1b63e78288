//! Alltoall algorithms.

pub mod pairwise;
pub mod shm_read;
