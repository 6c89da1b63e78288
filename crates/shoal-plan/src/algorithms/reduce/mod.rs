//! Reduce algorithms.

pub mod binomial;
pub mod direct;
