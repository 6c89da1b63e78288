//! Scenarios: a network shared by background traffic and training jobs,
//! run on the flow or the packet engine, measured (FCTs by size, long-flow throughput,
//! iteration times, link utilisation) and reported as JSON.
//!
//! - [`config`]: the configuration (flat pairs from the TOML file);
//! - [`ina`]: in-network aggregation trees at flow level;
//! - [`run`]: the simulation loop (flow engine) and what both engines share;
//! - [`packet_run`]: the same scenario on the packet engine;
//! - [`report`]: statistics and the JSON report.

pub mod config;
pub mod ina;
pub mod packet_run;
pub mod report;
pub mod run;

pub use config::ScenarioConfig;
pub use run::{run, ScenarioResult};
