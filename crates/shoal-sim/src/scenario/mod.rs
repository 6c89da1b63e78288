//! Scenarios: a network shared by background traffic and training jobs,
//! run on the flow or the packet engine, measured (FCTs by size, long-flow throughput,
//! iteration times, link utilisation) and reported as JSON.
//!
//! - [`config`]: the configuration (flat pairs from the TOML file);
//! - [`file`]: the TOML file read in Rust (`shoal-sim run`);
//! - [`ina`]: in-network aggregation trees at flow level;
//! - [`run`]: the simulation loop (flow engine) and what both engines share;
//! - [`packet_run`]: the same scenario on the packet engine;
//! - [`report`]: statistics and the JSON report;
//! - [`records`]: per-flow, per-iteration and per-link records as CSV
//!   (both engines);
//! - [`health`]: warnings for degenerate runs.

pub mod config;
pub mod file;
pub mod health;
pub mod ina;
pub mod packet_run;
pub mod records;
pub mod report;
pub mod run;

pub use config::{ConfigError, ScenarioConfig, ValueProblem};
pub use run::{run, run_with, ScenarioResult};
