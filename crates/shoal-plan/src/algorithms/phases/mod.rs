//! Communication patterns shared by several algorithms, written once.
//!
//! Each phase works on [`Blocks`](crate::partition::Blocks) of a vector and
//! takes the first tag round it may use, so algorithms can chain phases
//! (e.g. Rabenseifner = halving reduce-scatter + doubling allgather).

pub mod butterfly;
pub mod linear;
pub mod ring;
pub mod shared;
pub mod tree;
