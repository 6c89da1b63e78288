//! Scatter algorithms.

pub mod binomial;
pub mod linear;
