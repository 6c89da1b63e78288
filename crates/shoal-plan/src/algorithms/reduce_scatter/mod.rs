//! Reduce-scatter algorithms.

pub mod halving;
pub mod ring;
