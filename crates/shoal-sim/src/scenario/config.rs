//! A scenario's configuration: the network, background traffic and
//! training jobs, parsed from flat `key = value` pairs — the dotted keys of
//! the TOML file (`background.load`, `jobs.0.model`), flattened by the
//! Python front end (tomllib) so the Rust side needs no TOML parser.

use std::collections::BTreeMap;
use std::fmt;

use super::ina::InaMode;
use crate::engine::{Engine, UnknownEngine};
use crate::packet::PfcConfig;
use crate::topology::LinkSpec;
use crate::units::{parse_bytes, parse_rate, parse_time, seconds, Rate, UnitError};
use crate::workload::cdf::CdfError;
use crate::workload::models::{self, Model, UnknownModel};
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

/// A scenario that cannot be had from its keys: each error names the key
/// (or the keys) at fault.
#[derive(Debug)]
pub enum ConfigError {
    /// A key no scenario has (a typo must not be silently ignored).
    UnknownKey(String),
    /// A `jobs.` key that is not `jobs.N.FIELD`.
    JobKey(String),
    /// A value its key does not take.
    Value { key: String, problem: ValueProblem },
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

/// What is wrong with a key's value.
#[derive(Debug)]
pub enum ValueProblem {
    /// Not a number of the key's type (the value as written).
    NotANumber(String),
    /// A number outside 0..=1.
    NotAFraction(String),
    /// None of the words the key takes; `choices` says which.
    NotAChoice {
        value: String,
        choices: &'static str,
    },
    /// A rate, duration or size that does not parse.
    Unit(UnitError),
    /// A `background.trace` file that cannot be replayed.
    Trace(TraceError),
    Model(UnknownModel),
    Distribution(CdfError),
    Engine(UnknownEngine),
    Algorithm(AlgorithmError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::UnknownKey(key) => write!(f, "unknown scenario key {key:?}"),
            ConfigError::JobKey(key) => write!(f, "{key}: expected jobs.N.FIELD"),
            ConfigError::Value { key, problem } => match problem {
                ValueProblem::NotANumber(v) => write!(f, "{key} = {v:?}: not a valid number"),
                ValueProblem::NotAFraction(v) => {
                    write!(f, "{key} = {v}: must be between 0 and 1")
                }
                ValueProblem::NotAChoice { value, choices } => {
                    write!(f, "{key} = {value:?}: {choices}")
                }
                ValueProblem::Unit(e) => write!(f, "{key}: {e}"),
                // These name the value (or the file and line) themselves.
                ValueProblem::Trace(e) => write!(f, "{e}"),
                ValueProblem::Model(e) => write!(f, "{e}"),
                ValueProblem::Distribution(e) => write!(f, "{e}"),
                ValueProblem::Engine(e) => write!(f, "{e}"),
                ValueProblem::Algorithm(e) => write!(f, "{e}"),
            },
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

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// The key at fault, where one is.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey(key)
            | ConfigError::JobKey(key)
            | ConfigError::Value { key, .. } => Some(key),
            ConfigError::DurationNotPositive => Some("duration"),
            ConfigError::WarmupTooLong => Some("warmup"),
            ConfigError::JobTooSmall(_)
            | ConfigError::NoSlotsOrDistributions
            | ConfigError::PfcThresholds { .. } => None,
        }
    }
}

/// The error for `key`'s value.
fn refused(key: &str, problem: ValueProblem) -> ConfigError {
    ConfigError::Value {
        key: key.to_string(),
        problem,
    }
}

fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, ConfigError> {
    v.trim()
        .parse()
        .map_err(|_| refused(key, ValueProblem::NotANumber(v.to_string())))
}

fn fraction(key: &str, v: &str) -> Result<f64, ConfigError> {
    let x: f64 = number(key, v)?;
    if !(0.0..=1.0).contains(&x) {
        return Err(refused(key, ValueProblem::NotAFraction(v.to_string())));
    }
    Ok(x)
}

/// `v` parsed by a unit parser, its error naming `key`.
fn unit<T>(key: &str, v: &str, parse: fn(&str) -> Result<T, UnitError>) -> Result<T, ConfigError> {
    parse(v).map_err(|e| refused(key, ValueProblem::Unit(e)))
}

/// `v` if it is one of `words`, else an error naming `key` and `choices`.
fn choice<'a>(
    key: &str,
    v: &str,
    words: [&'a str; 2],
    choices: &'static str,
) -> Result<&'a str, ConfigError> {
    words.into_iter().find(|w| *w == v).ok_or_else(|| {
        refused(
            key,
            ValueProblem::NotAChoice {
                value: v.to_string(),
                choices,
            },
        )
    })
}

impl ScenarioConfig {
    /// The rate of the hosts' links, bit/s: what loads are fractions of.
    pub fn host_bps(&self) -> f64 {
        self.tier_rates
            .first()
            .unwrap_or(&self.link.rate)
            .bits_per_s()
    }

    /// Parses flat pairs; unknown keys are errors (a typo must not be
    /// silently ignored).
    pub fn from_pairs(
        pairs: &[(impl AsRef<str>, impl AsRef<str>)],
    ) -> Result<ScenarioConfig, ConfigError> {
        let mut cfg = ScenarioConfig::default();
        let mut jobs: BTreeMap<usize, BTreeMap<String, String>> = BTreeMap::new();
        let mut random: BTreeMap<String, String> = BTreeMap::new();
        let mut pfc: BTreeMap<String, String> = BTreeMap::new();
        for (key, value) in pairs {
            let (key, v) = (key.as_ref(), value.as_ref());
            let seconds_of = |v| unit(key, v, parse_time).map(seconds);
            match key {
                "topology" => cfg.topology = v.to_string(),
                "link" => cfg.link.rate = unit(key, v, parse_rate)?,
                "tier_rates" => {
                    cfg.tier_rates = v
                        .split(',')
                        .map(|r| unit(key, r.trim(), parse_rate))
                        .collect::<Result<_, _>>()?
                }
                "latency" => cfg.link.latency = unit(key, v, parse_time)?,
                "buffer" => cfg.link.buffer = unit(key, v, parse_bytes)?,
                "ecn_k" => cfg.ecn_k = number(key, v)?,
                "switch_memory" => cfg.switch_memory = unit(key, v, parse_bytes)?,
                "ina_min_bytes" => cfg.ina_min_bytes = unit(key, v, parse_bytes)?,
                "fallback" => cfg.fallback = v.to_string(),
                "slots_per_host" => cfg.slots_per_host = number(key, v)?,
                "chunk_bytes" => cfg.chunk_bytes = unit(key, v, parse_bytes)?,
                "duration" => cfg.duration_s = seconds_of(v)?,
                "seed" => cfg.seed = number(key, v)?,
                "rate_interval" => cfg.rate_interval_s = seconds_of(v)?,
                "tree_share" => {
                    let share = choice(key, v.trim(), ["split", "each"], "use split or each")?;
                    cfg.tree_share_each = share == "each";
                }
                "long_flows" => cfg.long_flows = number(key, v)?,
                "engine" => {
                    cfg.engine = Engine::parse(v.trim())
                        .map_err(|e| refused(key, ValueProblem::Engine(e)))?
                }
                "warmup" => cfg.warmup_s = seconds_of(v)?,
                "background.trace" => {
                    cfg.trace = trace::read(std::path::Path::new(v))
                        .map_err(|e| refused(key, ValueProblem::Trace(e)))?
                }
                "background.load" => cfg.background_load = fraction(key, v)?,
                "background.distribution" => {
                    cfg.distributions = v
                        .split(',')
                        .map(FlowSizeCdf::by_name)
                        .collect::<Result<_, _>>()
                        .map_err(|e| refused(key, ValueProblem::Distribution(e)))?
                }
                other => {
                    if let Some(rest) = other.strip_prefix("jobs.") {
                        let (index, field) = rest
                            .split_once('.')
                            .ok_or_else(|| ConfigError::JobKey(other.to_string()))?;
                        jobs.entry(number(other, index)?)
                            .or_default()
                            .insert(field.to_string(), v.to_string());
                    } else if let Some(field) = other.strip_prefix("random_jobs.") {
                        random.insert(field.to_string(), v.to_string());
                    } else if let Some(field) = other.strip_prefix("pfc.") {
                        pfc.insert(field.to_string(), v.to_string());
                    } else {
                        return Err(ConfigError::UnknownKey(other.to_string()));
                    }
                }
            }
        }
        for (index, fields) in jobs {
            cfg.jobs.push(job(index, fields)?);
        }
        if !random.is_empty() {
            cfg.random_jobs = Some(random_jobs(random)?);
        }
        cfg.pfc = pfc_config(&pfc, cfg.link.buffer)?;
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

fn algorithm(key: &str, v: &str) -> Result<Algorithm, ConfigError> {
    Algorithm::parse(v).map_err(|e| refused(key, ValueProblem::Algorithm(e)))
}

fn job(index: usize, fields: BTreeMap<String, String>) -> Result<JobConfig, ConfigError> {
    let mut job = JobConfig {
        workers: 0,
        model: models::MODELS[0],
        algorithm: Algorithm::Plan("ring".into()),
        trees: 4,
        close: true,
        only_tree: None,
    };
    for (field, v) in fields {
        let key = format!("jobs.{index}.{field}");
        match field.as_str() {
            "workers" => job.workers = number(&key, &v)?,
            "model" => {
                job.model =
                    models::by_name(&v).map_err(|e| refused(&key, ValueProblem::Model(e)))?
            }
            "algorithm" => job.algorithm = algorithm(&key, &v)?,
            "trees" => job.trees = number(&key, &v)?,
            "tree" => job.only_tree = Some(number(&key, &v)?),
            "placement" => {
                let choices = "use \"close\" or \"random\"";
                job.close = choice(&key, &v, ["close", "random"], choices)? == "close";
            }
            _ => return Err(ConfigError::UnknownKey(key)),
        }
    }
    if job.workers < 2 || job.trees == 0 {
        return Err(ConfigError::JobTooSmall(index));
    }
    Ok(job)
}

fn random_jobs(fields: BTreeMap<String, String>) -> Result<RandomJobs, ConfigError> {
    let mut r = RandomJobs {
        load: 0.0,
        algorithm: Algorithm::Plan("ring".into()),
        trees: 4,
    };
    for (field, v) in fields {
        let key = format!("random_jobs.{field}");
        match field.as_str() {
            "load" => r.load = fraction(&key, &v)?,
            "algorithm" => r.algorithm = algorithm(&key, &v)?,
            "trees" => r.trees = number(&key, &v)?,
            _ => return Err(ConfigError::UnknownKey(key)),
        }
    }
    Ok(r)
}

/// The keys `pfc.enabled` (true/false), `pfc.xoff`, `pfc.xon` (bytes);
/// `None` unless enabled. Unless given, the thresholds are
/// [`PfcConfig::for_buffer`]'s for the links' `buffer`, and `xon` keeps
/// its distance below a given `xoff`.
fn pfc_config(
    fields: &BTreeMap<String, String>,
    buffer: u64,
) -> Result<Option<PfcConfig>, ConfigError> {
    let mut enabled = false;
    let mut cfg = PfcConfig::for_buffer(buffer);
    let mut xon = None;
    for (field, v) in fields {
        let key = format!("pfc.{field}");
        match field.as_str() {
            "enabled" => {
                enabled = choice(&key, v.trim(), ["true", "false"], "true or false")? == "true"
            }
            "xoff" => cfg.xoff = unit(&key, v, parse_bytes)?,
            "xon" => xon = Some(unit(&key, v, parse_bytes)?),
            _ => return Err(ConfigError::UnknownKey(key)),
        }
    }
    cfg.xon = xon.unwrap_or(cfg.xoff.saturating_sub(3000));
    if cfg.xon >= cfg.xoff || cfg.xoff == 0 {
        return Err(ConfigError::PfcThresholds {
            xon: cfg.xon,
            xoff: cfg.xoff,
        });
    }
    Ok(enabled.then_some(cfg))
}
