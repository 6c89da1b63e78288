//! shoal's network simulator.
//!
//! - [`units`]: integer picosecond time, bit/s rates, and their parsers;
//! - [`topology`]: hosts, switches, directed links, fat-tree / leaf-spine /
//!   star constructors, ECMP routes;
//! - [`dag`]: a collective as a dependency graph of messages, generated from
//!   shoal's own plans: the input both engines consume.
//!
//! - [`event`]: the event queue and packet slab of the packet engine;
//! - [`packet`]: the packet-level engine (queues, ECN, DCTCP, INA);
//! - [`engine`]: one collective on one topology with a chosen engine.
//!
//! - [`error`]: [`SimError`], the entry points' error, wrapping the parts'
//!   typed errors ([`units::UnitError`], [`topology::TopologyError`],
//!   [`scenario::ConfigError`], [`dag::DagError`], [`flow::FlowError`], ...).
//!
//! See docs/sim.md.

pub mod dag;
pub mod engine;
pub mod error;
pub mod event;
pub mod flow;
pub mod packet;
pub mod panama;
pub mod plan;
pub mod scenario;
pub mod topology;
pub mod units;
pub mod workload;

pub use error::SimError;
