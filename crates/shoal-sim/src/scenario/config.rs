//! A scenario's configuration: the network, background traffic and
//! training jobs, as the engines run it. It is made from the scenario's
//! TOML ([`super::file`]: text or a file, with overrides) through the
//! file's typed shape ([`super::schema`]); here are its defaults, the
//! checks that take more than one key, and the errors that name the key.

use std::fmt;

use super::file;
use super::ina::InaMode;
use super::schema::{JobTable, PfcTable, Placement, ScenarioFile, TreeShare};
use crate::engine::Engine;
use crate::packet::PfcConfig;
use crate::topology::LinkSpec;
use crate::units::Rate;
use crate::workload::models::{self, Model, ModelMix};
use crate::workload::trace::{self, TraceError};
use crate::workload::{BackgroundFlow, FlowSizeCdf};

/// How a job reduces its gradients.
#[derive(Clone, Debug, PartialEq)]
pub enum Algorithm {
    /// A shoal allreduce plan (ring, rabenseifner, ...), run as its DAG.
    Plan(String),
    /// In-network aggregation (ina/panama, switchml, panama-0.88, ...).
    Ina(InaMode),
}

impl Algorithm {
    /// "ina" and "panama" are PANAMA; "panama-Q" waits for a fraction Q
    /// of the workers; "switchml" has no congestion control; anything
    /// else names a shoal allreduce plan.
    pub fn parse(name: &str) -> Result<Algorithm, AlgorithmError> {
        let name = name.trim().to_ascii_lowercase();
        Ok(match name.as_str() {
            "ina" | "panama" => Algorithm::Ina(InaMode::PANAMA),
            "switchml" => Algorithm::Ina(InaMode::SWITCHML),
            other => match other.strip_prefix("panama-") {
                Some(q) => {
                    let quorum: f64 = q.parse().map_err(|_| AlgorithmError::NotAFraction {
                        name: name.clone(),
                        quorum: q.to_string(),
                    })?;
                    if quorum.is_nan() || quorum <= 0.0 || quorum > 1.0 {
                        return Err(AlgorithmError::QuorumOutOfRange { name });
                    }
                    Algorithm::Ina(InaMode {
                        congestion_control: true,
                        quorum,
                    })
                }
                None => Algorithm::Plan(other.to_string()),
            },
        })
    }
}

/// A `panama-Q` algorithm whose quorum Q is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlgorithmError {
    /// Q is not a number.
    NotAFraction { name: String, quorum: String },
    /// Q is outside (0, 1].
    QuorumOutOfRange { name: String },
}

impl fmt::Display for AlgorithmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlgorithmError::NotAFraction { name, quorum } => {
                write!(f, "algorithm {name:?}: {quorum:?} is not a fraction")
            }
            AlgorithmError::QuorumOutOfRange { name } => {
                write!(f, "algorithm {name:?}: the quorum must be in (0, 1]")
            }
        }
    }
}

impl std::error::Error for AlgorithmError {}

/// One training job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobConfig {
    pub workers: usize,
    pub model: Model,
    pub algorithm: Algorithm,
    /// Aggregation trees (INA only).
    pub trees: usize,
    /// "close" (least span of host ids) or "random".
    pub close: bool,
    /// Use only this one of the trees (PANAMA Fig. 9's Agg1..Agg4).
    pub only_tree: Option<usize>,
}

/// Jobs drawn at random (paper: 16-96 workers, the six models) until the
/// jobs offer `load` of the host links.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomJobs {
    pub load: f64,
    pub algorithm: Algorithm,
    pub trees: usize,
    /// How each job's model is drawn (`model_weights`; default equal).
    pub models: ModelMix,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioConfig {
    pub topology: String,
    pub link: LinkSpec,
    /// Link rate per tier (hosts' links, then each switch tier up; the
    /// last for the tiers beyond); empty: `link` everywhere.
    pub tier_rates: Vec<Rate>,
    /// ECN threshold in packets (packet engine; the flow engine's fair
    /// shares are what DCTCP converges to at any K).
    pub ecn_k: u32,
    /// Aggregation memory per switch, bytes (PANAMA: 64 MB).
    pub switch_memory: u64,
    /// Only gradients above this are aggregated in the network (PANAMA:
    /// 40 MB); smaller ones use `fallback`.
    pub ina_min_bytes: u64,
    pub fallback: String,
    pub background_load: f64,
    pub distributions: Vec<FlowSizeCdf>,
    /// Flows replayed from a trace file (`background.trace`), besides the
    /// Poisson ones.
    pub trace: Vec<BackgroundFlow>,
    pub jobs: Vec<JobConfig>,
    pub random_jobs: Option<RandomJobs>,
    /// Persistent long flows between random host pairs, running the whole
    /// time (PANAMA Fig. 9's load).
    pub long_flows: usize,
    /// Workers a host may run (of different jobs): servers with several GPUs.
    pub slots_per_host: usize,
    /// Pipelining piece of plan-based allreduces (shoal's SHOAL_CHUNK_BYTES).
    pub chunk_bytes: u64,
    pub duration_s: f64,
    pub seed: u64,
    /// Rates are recomputed at most this often (0: at every start and end,
    /// exact). With background traffic on a large fabric every flow shares
    /// a link with every other through some chain, so each recompute is
    /// the whole network: batching them is what makes k = 16 affordable.
    pub rate_interval_s: f64,
    /// How a job's aggregation trees share the links: `false` ("split",
    /// default): together one fair share on every link, as one sender
    /// dealing packets round robin; `true` ("each"): a full share per tree
    /// on every link, as PANAMA's independent per-tree windows behave, so
    /// trees on disjoint core links each get their own share (Fig. 9), at
    /// the price of T shares at a worker's NIC against other traffic.
    pub tree_share_each: bool,
    /// Which engine runs the scenario (`engine = "flow"`, the default, or
    /// `"packet"`: every packet through every queue).
    pub engine: Engine,
    /// Time excluded from every metric at the start of the run (flows and
    /// iterations that start in it, the bytes links carry in it).
    pub warmup_s: f64,
    /// PFC/PAUSE at every switch port (packet engine; `pfc.enabled`,
    /// `pfc.xoff`, `pfc.xon`); `None`: drop-tail.
    pub pfc: Option<PfcConfig>,
}

impl Default for ScenarioConfig {
    fn default() -> Self {
        ScenarioConfig {
            topology: "fattree:k=4".into(),
            link: LinkSpec::default(),
            tier_rates: Vec::new(),
            ecn_k: 85,
            switch_memory: 64_000_000,
            ina_min_bytes: 40_000_000,
            fallback: "ring".into(),
            background_load: 0.0,
            distributions: vec![FlowSizeCdf::web_search(), FlowSizeCdf::data_mining()],
            trace: Vec::new(),
            jobs: Vec::new(),
            random_jobs: None,
            long_flows: 0,
            slots_per_host: 1,
            chunk_bytes: 1 << 20,
            duration_s: 0.1,
            seed: 1,
            rate_interval_s: 0.0,
            tree_share_each: false,
            engine: Engine::Flow,
            warmup_s: 0.0,
            pfc: None,
        }
    }
}

/// A scenario that cannot be had from its TOML and overrides: each error
/// names the key (or the keys) at fault and, for a key of the text, its
/// line.
#[derive(Debug)]
pub enum ConfigError {
    /// Text that is not TOML (toml's message names the line and column).
    Toml(Box<toml::de::Error>),
    /// A key no scenario has (a typo must not be silently ignored).
    UnknownKey { key: String, line: Option<usize> },
    /// A value its key does not take: what serde or the key's parser
    /// (sizes, rates, durations, models, ...) says is wrong with it.
    Value {
        key: String,
        line: Option<usize>,
        message: String,
    },
    /// An override under an array of tables that is not `jobs.N.FIELD`
    /// with N at most the number of jobs before it.
    ArrayKey(String),
    /// An override under a key whose value is not a table (`seed.x`).
    NotATable(String),
    /// A `background.trace` file that cannot be replayed.
    Trace(TraceError),
    /// Job N with fewer than 2 workers or no tree.
    JobTooSmall(usize),
    /// `duration` zero, negative or NaN.
    DurationNotPositive,
    /// `warmup` not shorter than `duration`.
    WarmupTooLong,
    /// `slots_per_host` 0 or no `background.distribution`.
    NoSlotsOrDistributions,
    /// `pfc.xon` not below `pfc.xoff`, or `pfc.xoff` 0.
    PfcThresholds { xon: u64, xoff: u64 },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(line) = self.line() {
            write!(f, "line {line}: ")?;
        }
        match self {
            ConfigError::Toml(e) => write!(f, "{e}"),
            ConfigError::UnknownKey { key, .. } => write!(f, "unknown scenario key {key:?}"),
            ConfigError::Value { key, message, .. } => write!(f, "{key}: {message}"),
            ConfigError::ArrayKey(key) => {
                let array = key.split('.').next().unwrap_or_default();
                write!(f, "{key}: expected {array}.N.FIELD, N from 0 in order")
            }
            ConfigError::NotATable(key) => {
                write!(f, "{key}: a key under a value that is not a table")
            }
            ConfigError::Trace(e) => write!(f, "background.trace: {e}"),
            ConfigError::JobTooSmall(index) => {
                write!(f, "jobs.{index}: needs workers >= 2 and trees >= 1")
            }
            ConfigError::DurationNotPositive => write!(f, "duration must be positive"),
            ConfigError::WarmupTooLong => write!(f, "warmup must be shorter than duration"),
            ConfigError::NoSlotsOrDistributions => write!(
                f,
                "slots_per_host must be >= 1 and background.distribution non-empty"
            ),
            ConfigError::PfcThresholds { xon, xoff } => write!(
                f,
                "pfc: need 0 <= xon < xoff, got xon {xon} and xoff {xoff}"
            ),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Toml(e) => Some(e),
            ConfigError::Trace(e) => Some(e),
            _ => None,
        }
    }
}

impl ConfigError {
    /// The key at fault, where one is.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { key, .. }
            | ConfigError::Value { key, .. }
            | ConfigError::ArrayKey(key)
            | ConfigError::NotATable(key) => Some(key),
            ConfigError::Trace(_) => Some("background.trace"),
            ConfigError::DurationNotPositive => Some("duration"),
            ConfigError::WarmupTooLong => Some("warmup"),
            ConfigError::Toml(_)
            | ConfigError::JobTooSmall(_)
            | ConfigError::NoSlotsOrDistributions
            | ConfigError::PfcThresholds { .. } => None,
        }
    }

    /// The line of the TOML text the key at fault is on, where it came
    /// from the text (not an override). A `Toml` error's message has its
    /// own.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::UnknownKey { line, .. } | ConfigError::Value { line, .. } => *line,
            _ => None,
        }
    }
}

impl ScenarioConfig {
    /// The rate of the hosts' links, bit/s: what loads are fractions of.
    pub fn host_bps(&self) -> f64 {
        self.tier_rates
            .first()
            .unwrap_or(&self.link.rate)
            .bits_per_s()
    }

    /// The scenario of `pairs` alone: overrides over an empty file
    /// ([`super::overrides`]), as the PANAMA reproduction and tests write
    /// scenarios.
    pub fn from_pairs(
        pairs: &[(impl AsRef<str>, impl AsRef<str>)],
    ) -> Result<ScenarioConfig, ConfigError> {
        file::parse("", pairs)
    }

    /// The configuration of a deserialized scenario file: its keys over
    /// the defaults, the trace read, and the checks that take more than
    /// one key.
    pub fn from_file(file: ScenarioFile) -> Result<ScenarioConfig, ConfigError> {
        let d = ScenarioConfig::default();
        let link = LinkSpec {
            rate: file.link.unwrap_or(d.link.rate),
            latency: file.latency.unwrap_or(d.link.latency),
            buffer: file.buffer.unwrap_or(d.link.buffer),
        };
        let background = file.background;
        let trace = match background.trace {
            Some(path) => trace::read(std::path::Path::new(&path)).map_err(ConfigError::Trace)?,
            None => Vec::new(),
        };
        let jobs = file
            .jobs
            .into_iter()
            .enumerate()
            .map(|(index, job)| job_config(index, job))
            .collect::<Result<_, _>>()?;
        let random_jobs = file.random_jobs.map(|r| RandomJobs {
            load: r.load.unwrap_or(0.0),
            algorithm: r.algorithm.unwrap_or(Algorithm::Plan("ring".into())),
            trees: r.trees.unwrap_or(4),
            models: r.model_weights.unwrap_or_default(),
        });
        let cfg = ScenarioConfig {
            topology: file.topology.unwrap_or(d.topology),
            link,
            tier_rates: file.tier_rates.unwrap_or(d.tier_rates),
            ecn_k: file.ecn_k.unwrap_or(d.ecn_k),
            switch_memory: file.switch_memory.unwrap_or(d.switch_memory),
            ina_min_bytes: file.ina_min_bytes.unwrap_or(d.ina_min_bytes),
            fallback: file.fallback.unwrap_or(d.fallback),
            background_load: background.load.unwrap_or(d.background_load),
            distributions: background.distribution.unwrap_or(d.distributions),
            trace,
            jobs,
            random_jobs,
            long_flows: file.long_flows.unwrap_or(d.long_flows),
            slots_per_host: file.slots_per_host.unwrap_or(d.slots_per_host),
            chunk_bytes: file.chunk_bytes.unwrap_or(d.chunk_bytes),
            duration_s: file.duration.unwrap_or(d.duration_s),
            seed: file.seed.unwrap_or(d.seed),
            rate_interval_s: file.rate_interval.unwrap_or(d.rate_interval_s),
            tree_share_each: file.tree_share == Some(TreeShare::Each),
            engine: file.engine.unwrap_or(d.engine),
            warmup_s: file.warmup.unwrap_or(d.warmup_s),
            pfc: pfc_config(&file.pfc, link.buffer)?,
        };
        if cfg.duration_s.is_nan() || cfg.duration_s <= 0.0 {
            return Err(ConfigError::DurationNotPositive);
        }
        if cfg.warmup_s.is_nan() || cfg.warmup_s >= cfg.duration_s {
            return Err(ConfigError::WarmupTooLong);
        }
        if cfg.slots_per_host == 0 || cfg.distributions.is_empty() {
            return Err(ConfigError::NoSlotsOrDistributions);
        }
        Ok(cfg)
    }
}

/// Job `index` of `[[jobs]]`: a ring allreduce of VGG16 over 4 trees,
/// placed close, unless it says otherwise.
fn job_config(index: usize, job: JobTable) -> Result<JobConfig, ConfigError> {
    let job = JobConfig {
        workers: job.workers.unwrap_or(0),
        model: job.model.unwrap_or(models::MODELS[0]),
        algorithm: job.algorithm.unwrap_or(Algorithm::Plan("ring".into())),
        trees: job.trees.unwrap_or(4),
        close: job.placement != Some(Placement::Random),
        only_tree: job.tree,
    };
    if job.workers < 2 || job.trees == 0 {
        return Err(ConfigError::JobTooSmall(index));
    }
    Ok(job)
}

/// `[pfc]`: `None` unless enabled. Unless given, the thresholds are
/// [`PfcConfig::for_buffer`]'s for the links' `buffer`, and `xon` keeps
/// its distance below a given `xoff`. They are checked even when PFC is
/// off, as a typo in them should not wait for the day it is turned on.
fn pfc_config(table: &PfcTable, buffer: u64) -> Result<Option<PfcConfig>, ConfigError> {
    let mut cfg = PfcConfig::for_buffer(buffer);
    if let Some(xoff) = table.xoff {
        cfg.xoff = xoff;
    }
    cfg.xon = table.xon.unwrap_or(cfg.xoff.saturating_sub(3000));
    if cfg.xon >= cfg.xoff || cfg.xoff == 0 {
        return Err(ConfigError::PfcThresholds {
            xon: cfg.xon,
            xoff: cfg.xoff,
        });
    }
    Ok(table.enabled.then_some(cfg))
}
