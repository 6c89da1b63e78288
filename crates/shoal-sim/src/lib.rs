//! shoal's network simulator.
//!
//! - [`units`]: integer picosecond time, bit/s rates, and their parsers;
//! - [`topology`]: hosts, switches, directed links, fat-tree / leaf-spine /
//!   star constructors, ECMP routes;
//! - [`dag`]: a collective as a dependency graph of messages, generated from
//!   shoal's own plans: the input both engines consume.
//!
//! See docs/sim.md.

pub mod dag;
pub mod flow;
pub mod topology;
pub mod units;
pub mod workload;
