//! Reproducing PANAMA's evaluation (section 7) on either engine (the
//! scenario's `engine` key).
//!
//! - Fig. 8: p99 short-flow FCT, long-flow throughput and training
//!   (iteration) time against total load, for Ideal, Ring-AllReduce,
//!   SwitchML*-like, PANAMA and PANAMA-0.88/0.94: [`fig8_point`];
//! - Fig. 9 (1 vs 4 trees) is a scenario (jobs.N.tree, long_flows): built by
//!   python/shoal/sim/panama.py;
//! - Fig. 10: an aggregation flow and a background flow on one link:
//!   [`fig10`].

use crate::error::SimError;
use crate::flow::{Event, FlowEngine};
use crate::scenario::config::{Algorithm, RandomJobs};
use crate::scenario::ina::NO_CC_WEIGHT;
use crate::scenario::{records, run, ScenarioConfig, ScenarioResult};
use crate::workload::models::ModelMix;
use std::path::Path;

/// The configurations of Fig. 8.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Variant {
    /// Aggregation, short and long flows each in a dedicated cluster.
    Ideal,
    Ring,
    SwitchMl,
    Panama,
    /// PANAMA aggregating once this fraction of workers is in.
    Partial(f64),
}

impl Variant {
    pub fn parse(name: &str) -> Result<Variant, SimError> {
        match Algorithm::parse(name)? {
            _ if name == "ideal" => Ok(Variant::Ideal),
            Algorithm::Plan(p) if p == "ring" => Ok(Variant::Ring),
            Algorithm::Ina(m) if !m.congestion_control => Ok(Variant::SwitchMl),
            Algorithm::Ina(m) if m.quorum < 1.0 => Ok(Variant::Partial(m.quorum)),
            Algorithm::Ina(_) => Ok(Variant::Panama),
            Algorithm::Plan(_) => Err(SimError::UnknownVariant(name.to_string())),
        }
    }

    fn algorithm(self) -> Algorithm {
        match self {
            Variant::Ring => Algorithm::Plan("ring".into()),
            Variant::SwitchMl => Algorithm::parse("switchml").expect("known"),
            Variant::Partial(q) => Algorithm::parse(&format!("panama-{q}")).expect("known"),
            Variant::Ideal | Variant::Panama => Algorithm::parse("panama").expect("known"),
        }
    }
}

/// One point of Fig. 8.
#[derive(Clone, Debug, PartialEq)]
pub struct Fig8Point {
    pub target_load: f64,
    /// Background plus the jobs' offered load actually placed.
    pub total_load: f64,
    pub p99_short_fct_s: f64,
    pub long_throughput_bps: f64,
    pub mean_iteration_s: f64,
    /// Each job's mean iteration after the warm-up (`None`: none finished),
    /// and whether PANAMA aggregates its gradient: compared job by job
    /// between variants (python/shoal/sim/paper_metrics.py).
    pub job_iteration_s: Vec<Option<f64>>,
    pub job_aggregated: Vec<bool>,
    /// The load the hosts' uplinks carried after the warm-up.
    pub carried_load: f64,
    /// The engine's counters (drops, PFC pauses, ...; Ideal: the
    /// background cluster's).
    pub counters: Vec<(&'static str, f64)>,
    pub jobs: usize,
    pub events: u64,
    pub wall_s: f64,
}

impl Fig8Point {
    pub fn to_json(&self) -> String {
        format!(
            "{{\"target_load\": {:e}, \"total_load\": {:e}, \"p99_short_fct_s\": {:e}, \"long_throughput_bps\": {:e}, \
             \"mean_iteration_s\": {:e}, \"job_iteration_s\": [{}], \"job_aggregated\": [{}], \"carried_load\": {:e}, \
             \"counters\": {{{}}}, \"jobs\": {}, \"events\": {}, \"wall_s\": {:e}}}",
            self.target_load,
            self.total_load,
            self.p99_short_fct_s,
            self.long_throughput_bps,
            self.mean_iteration_s,
            self.job_iteration_s
                .iter()
                .map(|t| t.map_or("null".to_string(), |t| format!("{t:e}")))
                .collect::<Vec<_>>()
                .join(", "),
            self.job_aggregated
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            self.carried_load,
            self.counters
                .iter()
                .map(|(name, v)| format!("\"{name}\": {v:e}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.jobs,
            self.events,
            self.wall_s
        )
    }
}

/// Simulates `variant` at total load `load`: `base`'s background plus
/// random jobs (the same jobs for every variant: one seed) up to `load`.
pub fn fig8_point(
    base: &ScenarioConfig,
    variant: Variant,
    load: f64,
) -> Result<Fig8Point, SimError> {
    fig8_point_recorded(base, variant, load, None)
}

/// As [`fig8_point`], writing the run's records (`flows.csv`,
/// `iterations.csv`, `links.csv`) into `records`; Ideal's two runs into
/// its `background/` and `jobs/`.
pub fn fig8_point_recorded(
    base: &ScenarioConfig,
    variant: Variant,
    load: f64,
    records: Option<&Path>,
) -> Result<Fig8Point, SimError> {
    let write = |r: &ScenarioResult, sub: &str| -> Result<(), SimError> {
        match records {
            Some(dir) => {
                let dir = dir.join(sub);
                records::write(r, &dir).map_err(|error| SimError::Write {
                    path: dir.display().to_string(),
                    error,
                })
            }
            None => Ok(()),
        }
    };
    let mut cfg = base.clone();
    let job_load = (load - base.background_load).max(0.0);
    // The base's trees and model mix; the variant's algorithm, up to the load.
    let (trees, models) = base
        .random_jobs
        .as_ref()
        .map_or((4, ModelMix::Equal), |r| (r.trees, r.models.clone()));
    cfg.random_jobs = (job_load > 0.0).then(|| RandomJobs {
        load: job_load,
        algorithm: variant.algorithm(),
        trees,
        models,
    });
    let mut quiet = |_| {};
    if variant != Variant::Ideal {
        let r = run(&cfg, &mut quiet)?;
        write(&r, "")?;
        return Ok(Fig8Point {
            target_load: load,
            total_load: r.total_load(),
            p99_short_fct_s: r.short_fct().p99,
            long_throughput_bps: r.long_throughput_bps(),
            mean_iteration_s: r.mean_iteration_s(),
            job_iteration_s: r.job_iteration_s(),
            job_aggregated: r.job_aggregated(),
            carried_load: r.carried_load,
            counters: r.counters.clone(),
            jobs: r.jobs.len(),
            events: r.events,
            wall_s: r.wall_s,
        });
    }
    // Ideal: the background alone, and the jobs alone.
    let mut background = cfg.clone();
    background.random_jobs = None;
    let flows = run(&background, &mut quiet)?;
    write(&flows, "background")?;
    let mut jobs = cfg;
    jobs.background_load = 0.0;
    let training = run(&jobs, &mut quiet)?;
    write(&training, "jobs")?;
    Ok(Fig8Point {
        target_load: load,
        total_load: base.background_load + training.total_load(),
        p99_short_fct_s: flows.short_fct().p99,
        long_throughput_bps: flows.long_throughput_bps(),
        mean_iteration_s: training.mean_iteration_s(),
        job_iteration_s: training.job_iteration_s(),
        job_aggregated: training.job_aggregated(),
        // Two separate clusters: what each carried, together.
        carried_load: flows.carried_load + training.carried_load,
        counters: flows.counters.clone(),
        jobs: training.jobs.len(),
        events: flows.events + training.events,
        wall_s: flows.wall_s + training.wall_s,
    })
}

/// Fig. 10's time series: rates on the shared link, sampled.
#[derive(Clone, Debug, PartialEq)]
pub struct Fig10Series {
    pub time_s: Vec<f64>,
    pub background_bps: Vec<f64>,
    pub aggregation_bps: Vec<f64>,
}

impl Fig10Series {
    pub fn to_json(&self) -> String {
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:e}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "{{\"time_s\": [{}], \"background_bps\": [{}], \"aggregation_bps\": [{}]}}",
            list(&self.time_s),
            list(&self.background_bps),
            list(&self.aggregation_bps)
        )
    }
}

/// Fig. 10: a background flow on a 10 Gb/s bottleneck from t = 0, an
/// aggregation flow joining at 0.25 s; with PANAMA's congestion control
/// (fair, weight 1) or without (it does not back off). Sampled every 10 ms
/// for 1 s.
pub fn fig10(congestion_control: bool) -> Result<Fig10Series, SimError> {
    let mut engine = FlowEngine::new(&[10e9])?;
    let big = 10_000_000_000;
    let background = engine.start_flow(0.0, &[0], big, 0.0, f64::INFINITY, 0)?;
    let mut aggregation = None;
    let mut series = Fig10Series {
        time_s: Vec::new(),
        background_bps: Vec::new(),
        aggregation_bps: Vec::new(),
    };
    for step in 1..=100 {
        engine.timer(step as f64 * 0.01, step);
    }
    engine.timer(0.25, 0);
    while let Some(event) = engine.next_event() {
        match event {
            Event::Timer { token: 0, .. } => {
                let id = engine.start_flow(0.25, &[0], big, 0.0, f64::INFINITY, 1)?;
                if !congestion_control {
                    engine.set_weight(id, NO_CC_WEIGHT);
                }
                aggregation = Some(id);
            }
            Event::Timer { time_s, token } => {
                series.time_s.push(time_s);
                series.background_bps.push(engine.rate_bps(background));
                series
                    .aggregation_bps
                    .push(aggregation.map_or(0.0, |a| engine.rate_bps(a)));
                if token == 100 {
                    break;
                }
            }
            Event::Delivered { .. } | Event::Sent { .. } => {}
        }
    }
    Ok(series)
}
