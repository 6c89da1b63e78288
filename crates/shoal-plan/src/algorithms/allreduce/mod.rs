//! Allreduce algorithms.

pub mod binomial;
pub mod direct;
pub mod hierarchical;
pub mod hierarchical_ina;
pub mod rabenseifner;
pub mod recursive_doubling;
pub mod ring;
pub mod shm_flat;
pub mod shm_sharded;
