//! A scenario's configuration: the network, background traffic and
//! training jobs, parsed from flat `key = value` pairs — the dotted keys of
//! the TOML file (`background.load`, `jobs.0.model`), flattened by the
//! Python front end (tomllib) so the Rust side needs no TOML parser.

use std::collections::BTreeMap;

use super::ina::InaMode;
use crate::engine::Engine;
use crate::packet::PfcConfig;
use crate::topology::LinkSpec;
use crate::units::{parse_bytes, parse_rate, parse_time, seconds, Rate};
use crate::workload::models::{self, Model};
use crate::workload::{trace, BackgroundFlow, FlowSizeCdf};

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
    pub fn parse(name: &str) -> Result<Algorithm, String> {
        let name = name.trim().to_ascii_lowercase();
        Ok(match name.as_str() {
            "ina" | "panama" => Algorithm::Ina(InaMode::PANAMA),
            "switchml" => Algorithm::Ina(InaMode::SWITCHML),
            other => match other.strip_prefix("panama-") {
                Some(q) => {
                    let quorum: f64 = q
                        .parse()
                        .map_err(|_| format!("algorithm {name:?}: {q:?} is not a fraction"))?;
                    if quorum.is_nan() || quorum <= 0.0 || quorum > 1.0 {
                        return Err(format!("algorithm {name:?}: the quorum must be in (0, 1]"));
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

fn number<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{key} = {v:?}: not a valid number"))
}

fn fraction(key: &str, v: &str) -> Result<f64, String> {
    let x: f64 = number(key, v)?;
    if !(0.0..=1.0).contains(&x) {
        return Err(format!("{key} = {v}: must be between 0 and 1"));
    }
    Ok(x)
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
    ) -> Result<ScenarioConfig, String> {
        let mut cfg = ScenarioConfig::default();
        let (mut link, mut latency, mut buffer) = (None, None, None);
        let mut jobs: BTreeMap<usize, BTreeMap<String, String>> = BTreeMap::new();
        let mut random: BTreeMap<String, String> = BTreeMap::new();
        let mut pfc: BTreeMap<String, String> = BTreeMap::new();
        for (key, value) in pairs {
            let (key, v) = (key.as_ref(), value.as_ref());
            match key {
                "topology" => cfg.topology = v.to_string(),
                "link" => link = Some(v.to_string()),
                "tier_rates" => {
                    cfg.tier_rates = v
                        .split(',')
                        .map(|r| parse_rate(r.trim()))
                        .collect::<Result<_, _>>()
                        .map_err(|e| format!("tier_rates: {e}"))?
                }
                "latency" => latency = Some(v.to_string()),
                "buffer" => buffer = Some(v.to_string()),
                "ecn_k" => cfg.ecn_k = number(key, v)?,
                "switch_memory" => cfg.switch_memory = parse_bytes(v).map_err(|e| e.to_string())?,
                "ina_min_bytes" => cfg.ina_min_bytes = parse_bytes(v).map_err(|e| e.to_string())?,
                "fallback" => cfg.fallback = v.to_string(),
                "slots_per_host" => cfg.slots_per_host = number(key, v)?,
                "chunk_bytes" => cfg.chunk_bytes = parse_bytes(v).map_err(|e| e.to_string())?,
                "duration" => cfg.duration_s = seconds(parse_time(v).map_err(|e| e.to_string())?),
                "seed" => cfg.seed = number(key, v)?,
                "rate_interval" => {
                    cfg.rate_interval_s = seconds(parse_time(v).map_err(|e| e.to_string())?)
                }
                "tree_share" => {
                    cfg.tree_share_each = match v.trim() {
                        "split" => false,
                        "each" => true,
                        other => return Err(format!("tree_share = {other:?}: use split or each")),
                    }
                }
                "long_flows" => cfg.long_flows = number(key, v)?,
                "engine" => cfg.engine = Engine::parse(v.trim())?,
                "warmup" => cfg.warmup_s = seconds(parse_time(v).map_err(|e| e.to_string())?),
                "background.trace" => {
                    cfg.trace = trace::read(std::path::Path::new(v)).map_err(|e| e.to_string())?
                }
                "background.load" => cfg.background_load = fraction(key, v)?,
                "background.distribution" => {
                    cfg.distributions = v
                        .split(',')
                        .map(FlowSizeCdf::by_name)
                        .collect::<Result<_, _>>()
                        .map_err(|e| e.to_string())?
                }
                other => {
                    if let Some(rest) = other.strip_prefix("jobs.") {
                        let (index, field) = rest
                            .split_once('.')
                            .ok_or_else(|| format!("{other}: expected jobs.N.FIELD"))?;
                        jobs.entry(number(other, index)?)
                            .or_default()
                            .insert(field.to_string(), v.to_string());
                    } else if let Some(field) = other.strip_prefix("random_jobs.") {
                        random.insert(field.to_string(), v.to_string());
                    } else if let Some(field) = other.strip_prefix("pfc.") {
                        pfc.insert(field.to_string(), v.to_string());
                    } else {
                        return Err(format!("unknown scenario key {other:?}"));
                    }
                }
            }
        }
        cfg.link = LinkSpec::parse(link.as_deref(), latency.as_deref(), buffer.as_deref())
            .map_err(|e| e.to_string())?;
        for (index, fields) in jobs {
            cfg.jobs.push(job(index, fields)?);
        }
        if !random.is_empty() {
            let mut r = RandomJobs {
                load: 0.0,
                algorithm: Algorithm::Plan("ring".into()),
                trees: 4,
            };
            for (field, v) in random {
                let key = format!("random_jobs.{field}");
                match field.as_str() {
                    "load" => r.load = fraction(&key, &v)?,
                    "algorithm" => r.algorithm = Algorithm::parse(&v)?,
                    "trees" => r.trees = number(&key, &v)?,
                    _ => return Err(format!("unknown scenario key {key:?}")),
                }
            }
            cfg.random_jobs = Some(r);
        }
        cfg.pfc = PfcConfig::from_fields(&pfc, cfg.link.buffer)?;
        if cfg.duration_s.is_nan() || cfg.duration_s <= 0.0 {
            return Err("duration must be positive".into());
        }
        if cfg.warmup_s.is_nan() || cfg.warmup_s >= cfg.duration_s {
            return Err("warmup must be shorter than duration".into());
        }
        if cfg.slots_per_host == 0 || cfg.distributions.is_empty() {
            return Err("slots_per_host must be >= 1 and background.distribution non-empty".into());
        }
        Ok(cfg)
    }
}

fn job(index: usize, fields: BTreeMap<String, String>) -> Result<JobConfig, String> {
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
            "model" => job.model = models::by_name(&v).map_err(|e| e.to_string())?,
            "algorithm" => job.algorithm = Algorithm::parse(&v)?,
            "trees" => job.trees = number(&key, &v)?,
            "tree" => job.only_tree = Some(number(&key, &v)?),
            "placement" => {
                job.close = match v.as_str() {
                    "close" => true,
                    "random" => false,
                    other => return Err(format!("{key} = {other:?}: use \"close\" or \"random\"")),
                }
            }
            _ => return Err(format!("unknown scenario key {key:?}")),
        }
    }
    if job.workers < 2 || job.trees == 0 {
        return Err(format!("jobs.{index}: needs workers >= 2 and trees >= 1"));
    }
    Ok(job)
}
