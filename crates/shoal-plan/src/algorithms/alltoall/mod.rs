//! Alltoall algorithms.

pub mod pairwise;
