//! Barrier algorithms.

pub mod dissemination;
