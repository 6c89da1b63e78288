//! Scenarios: a network shared by background traffic and training jobs,
//! run on the flow or the packet engine, measured (FCTs by size, long-flow throughput,
//! iteration times, link utilisation) and reported as JSON.
//!
//! - [`config`]: the configuration the engines run, its defaults and
//!   checks, and [`ConfigError`];
//! - [`file`]: a scenario's TOML (text or file, with overrides) made into
//!   its configuration: the one parser, for `shoal-sim run` and Python;
//! - [`schema`]: the TOML file's shape as serde structs;
//! - [`values`]: serde deserializers for sizes, rates, durations and names;
//! - [`overrides`]: `(dotted key, value)` pairs set over the TOML;
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
pub mod overrides;
pub mod packet_run;
pub mod records;
pub mod report;
pub mod run;
pub mod schema;
pub mod values;

pub use config::{ConfigError, ScenarioConfig};
pub use run::{run, run_with, ScenarioResult};
