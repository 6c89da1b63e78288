//! The scenario file's shape: one serde struct per TOML table, every key
//! optional (absent: [`ScenarioConfig`]'s default) and every other key
//! refused (`deny_unknown_fields`: a typo must not be silently ignored).
//! [`ScenarioConfig::from_file`] turns it into the configuration the
//! engines run.
//!
//! [`ScenarioConfig`]: super::ScenarioConfig
//! [`ScenarioConfig::from_file`]: super::ScenarioConfig::from_file

use serde::Deserialize;

use super::config::Algorithm;
use super::values;
use crate::engine::Engine;
use crate::units::{Rate, Time};
use crate::workload::models::{Model, ModelMix};
use crate::workload::FlowSizeCdf;

/// The top-level table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    #[serde(default, deserialize_with = "values::text")]
    pub topology: Option<String>,
    #[serde(default, deserialize_with = "values::rate")]
    pub link: Option<Rate>,
    #[serde(default, deserialize_with = "values::rates")]
    pub tier_rates: Option<Vec<Rate>>,
    #[serde(default, deserialize_with = "values::time")]
    pub latency: Option<Time>,
    #[serde(default, deserialize_with = "values::size")]
    pub buffer: Option<u64>,
    pub ecn_k: Option<u32>,
    #[serde(default, deserialize_with = "values::size")]
    pub switch_memory: Option<u64>,
    #[serde(default, deserialize_with = "values::size")]
    pub ina_min_bytes: Option<u64>,
    #[serde(default, deserialize_with = "values::text")]
    pub fallback: Option<String>,
    pub slots_per_host: Option<usize>,
    #[serde(default, deserialize_with = "values::size")]
    pub chunk_bytes: Option<u64>,
    #[serde(default, deserialize_with = "values::seconds_of")]
    pub duration: Option<f64>,
    pub seed: Option<u64>,
    #[serde(default, deserialize_with = "values::seconds_of")]
    pub rate_interval: Option<f64>,
    pub tree_share: Option<TreeShare>,
    pub long_flows: Option<usize>,
    #[serde(default, deserialize_with = "values::engine")]
    pub engine: Option<Engine>,
    #[serde(default, deserialize_with = "values::seconds_of")]
    pub warmup: Option<f64>,
    #[serde(default)]
    pub background: BackgroundTable,
    /// `[[jobs]]`, one table per job.
    #[serde(default)]
    pub jobs: Vec<JobTable>,
    pub random_jobs: Option<RandomJobsTable>,
    #[serde(default)]
    pub pfc: PfcTable,
}

/// The keys that hold arrays of tables: an override names an element
/// by its index (`jobs.0.model`).
pub const TABLE_ARRAYS: [&str; 1] = ["jobs"];

/// How a job's aggregation trees share the links (`tree_share`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TreeShare {
    /// Together one fair share on every link.
    Split,
    /// A full share per tree on every link.
    Each,
}

/// `[background]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundTable {
    #[serde(default, deserialize_with = "values::fraction")]
    pub load: Option<f64>,
    #[serde(default, deserialize_with = "values::distributions")]
    pub distribution: Option<Vec<FlowSizeCdf>>,
    /// A flow trace's file name (read when the configuration is made).
    #[serde(default, deserialize_with = "values::text")]
    pub trace: Option<String>,
}

/// One `[[jobs]]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobTable {
    pub workers: Option<usize>,
    #[serde(default, deserialize_with = "values::model")]
    pub model: Option<Model>,
    #[serde(default, deserialize_with = "values::algorithm")]
    pub algorithm: Option<Algorithm>,
    pub trees: Option<usize>,
    pub tree: Option<usize>,
    pub placement: Option<Placement>,
}

/// Where a job's workers go (`placement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// The least span of host ids.
    Close,
    Random,
}

/// `[random_jobs]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomJobsTable {
    #[serde(default, deserialize_with = "values::fraction")]
    pub load: Option<f64>,
    #[serde(default, deserialize_with = "values::algorithm")]
    pub algorithm: Option<Algorithm>,
    pub trees: Option<usize>,
    /// `{ vgg16 = 2, alexnet = 1 }`: a model not named weighs 0.
    #[serde(default, deserialize_with = "values::model_weights")]
    pub model_weights: Option<ModelMix>,
}

/// `[pfc]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PfcTable {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default, deserialize_with = "values::size")]
    pub xoff: Option<u64>,
    #[serde(default, deserialize_with = "values::size")]
    pub xon: Option<u64>,
}
