//! Running a scenario on the packet engine: the same jobs, background and
//! long flows as the flow engine's runner (`run.rs`), but every packet
//! through every queue. Background and long flows are DCTCP flows; a plan
//! allreduce is its real message DAG over DCTCP connections; aggregation is
//! the packet engine's INA (PANAMA's window control over several trees, or
//! the SwitchML*-like fixed window, `InaMode::congestion_control`).

use std::collections::HashMap;

use super::config::ScenarioConfig;
use super::run::{
    background_flows, first_iterations, long_flow_pairs, place_jobs_with, topology, utilisation,
    Comm, FlowRecord, LinkSamples, ScenarioResult, LINK_SAMPLES,
};
use crate::dag::{BuiltinOnly, PlanSource};
use crate::engine::Engine;
use crate::error::SimError;
use crate::packet::{Completion, InaJob, PacketConfig, PacketSim};
use crate::topology::Topology;
use crate::units::{seconds, Time, PS_PER_S};

fn picoseconds(s: f64) -> Time {
    (s * PS_PER_S as f64).round() as Time
}

/// What a finished flow, collective or aggregation job was.
#[derive(Clone, Copy)]
enum Owner {
    /// Background flow `.0` (its index in the drawn flows).
    Background(usize),
    /// The persistent long flows and the connections of collectives.
    Other,
    /// One allreduce of job `.0`.
    Job(usize),
}

/// Starts one allreduce of `job` at `start`; returns the completion it
/// will end with.
fn start_allreduce(
    sim: &mut PacketSim,
    job: &super::run::PlacedJob,
    start: Time,
) -> Result<Completion, SimError> {
    Ok(match &job.comm {
        Comm::Dag(dag) => Completion::Collective(sim.add_collective((**dag).clone(), start)?),
        Comm::Ina { mode, .. } => {
            let mut ina = InaJob::new(job.hosts.clone(), job.config.model.gradient_bytes());
            // The trees the flow engine's runner built (`Comm::Ina`), by
            // the same rule: the first `trees` roots, or one of them.
            ina.trees = job.config.trees;
            ina.only_tree = job.config.only_tree;
            ina.quorum = mode.quorum;
            ina.congestion_control = mode.congestion_control;
            Completion::Ina(sim.add_ina_job(ina, start)?)
        }
    })
}

/// Runs `cfg` on the packet engine (whatever its `engine` key says;
/// [`super::run`] picks the engine by it); `progress` gets the simulated
/// fraction done (0..=1), and `source` supplies the jobs' allreduce
/// algorithms the built-in registry does not have (registered from Python).
pub fn run_with(
    cfg: &ScenarioConfig,
    progress: &mut dyn FnMut(f64),
    source: &dyn PlanSource,
) -> Result<ScenarioResult, SimError> {
    run_inspected_with(cfg, progress, source, &mut |_, _| {})
}

/// [`run_with`] for the built-in algorithms, handing the simulation and its
/// topology to `inspect` at the end (tests check the network's invariants
/// there).
pub fn run_inspected(
    cfg: &ScenarioConfig,
    progress: &mut dyn FnMut(f64),
    inspect: &mut dyn FnMut(&PacketSim, &Topology),
) -> Result<ScenarioResult, SimError> {
    run_inspected_with(cfg, progress, &BuiltinOnly, inspect)
}

fn run_inspected_with(
    cfg: &ScenarioConfig,
    progress: &mut dyn FnMut(f64),
    source: &dyn PlanSource,
    inspect: &mut dyn FnMut(&PacketSim, &Topology),
) -> Result<ScenarioResult, SimError> {
    let t0 = std::time::Instant::now();
    let topo = topology(cfg)?;
    let jobs = place_jobs_with(cfg, &topo, source)?;
    let mut sim = PacketSim::new(
        &topo,
        PacketConfig {
            ecn_k: cfg.ecn_k,
            seed: cfg.seed,
            ina_memory: cfg.switch_memory,
            pfc: cfg.pfc,
            ..PacketConfig::default()
        },
    );
    let mut owners: HashMap<Completion, Owner> = HashMap::new();
    let background = background_flows(cfg, &topo)?;
    for (i, f) in background.iter().enumerate() {
        let id = sim.add_flow(
            f.src as usize,
            f.dst as usize,
            f.bytes,
            picoseconds(f.start_s),
        );
        owners.insert(Completion::Flow(id), Owner::Background(i));
    }
    let long_bytes = (cfg.host_bps() / 8.0 * cfg.duration_s * 2.0) as u64;
    for (src, dst) in long_flow_pairs(cfg, &topo, &jobs) {
        let id = sim.add_flow(src, dst, long_bytes, 0);
        owners.insert(Completion::Flow(id), Owner::Other);
    }
    let mut iteration_start = first_iterations(cfg, &jobs);
    for (j, job) in jobs.iter().enumerate() {
        let start = picoseconds(iteration_start[j] + job.config.model.compute_s);
        owners.insert(start_allreduce(&mut sim, job, start)?, Owner::Job(j));
    }

    let (warmup, end) = (picoseconds(cfg.warmup_s), picoseconds(cfg.duration_s));
    let mut warm_bytes = vec![0.0; topo.links.len()];
    let mut warm = warmup == 0;
    let mut flows = Vec::new();
    let mut iterations = vec![Vec::new(); jobs.len()];
    let mut iteration_starts = vec![Vec::new(); jobs.len()];
    // links.csv: the links' bytes at LINK_SAMPLES even instants, the last
    // at the end, as the flow engine samples them.
    let mut link_samples = LinkSamples::new(&topo);
    let sample_at = |k: usize| end * k as Time / LINK_SAMPLES as Time;
    let mut next_sample = 1;
    let mut reported = 0;
    loop {
        let stop = if warm {
            sample_at(next_sample)
        } else {
            warmup.min(sample_at(next_sample))
        };
        let Some(done) = sim.run_until_completion(stop) else {
            let bytes: Vec<f64> = sim.link_bytes().iter().map(|&b| b as f64).collect();
            if !warm && stop == warmup {
                warm = true;
                warm_bytes = bytes.clone();
            }
            if stop == sample_at(next_sample) {
                link_samples.times_s.push(seconds(stop));
                link_samples.bytes.push(bytes);
                if next_sample == LINK_SAMPLES {
                    break;
                }
                next_sample += 1;
            }
            continue;
        };
        let now = sim.now();
        match owners.remove(&done).unwrap_or(Owner::Other) {
            Owner::Background(i) => {
                let f = &background[i];
                if f.start_s >= cfg.warmup_s {
                    flows.push(FlowRecord {
                        start_s: f.start_s,
                        bytes: f.bytes,
                        fct_s: seconds(now) - f.start_s,
                        src: f.src,
                        dst: f.dst,
                    });
                }
            }
            Owner::Other => {}
            Owner::Job(j) => {
                let finish = seconds(now);
                if iteration_start[j] >= cfg.warmup_s {
                    iterations[j].push(finish - iteration_start[j]);
                    iteration_starts[j].push(iteration_start[j]);
                }
                iteration_start[j] = finish;
                let next = now + picoseconds(jobs[j].config.model.compute_s);
                owners.insert(start_allreduce(&mut sim, &jobs[j], next)?, Owner::Job(j));
            }
        }
        if now - reported >= end / 100 {
            reported = now;
            progress(seconds(now) / cfg.duration_s);
        }
    }
    progress(1.0);
    inspect(&sim, &topo);
    let end_bytes: Vec<f64> = sim.link_bytes().iter().map(|&b| b as f64).collect();
    let (link_utilisation, carried_load) = utilisation(
        &topo,
        &warm_bytes,
        &end_bytes,
        cfg.duration_s - cfg.warmup_s,
    );
    let measured = background
        .iter()
        .filter(|f| f.start_s >= cfg.warmup_s && f.start_s < cfg.duration_s)
        .count();
    let stats = sim.stats();
    let pfc = sim.pfc_stats();
    let link_time = seconds(end) * topo.links.len() as f64;
    Ok(ScenarioResult {
        duration_s: cfg.duration_s,
        warmup_s: cfg.warmup_s,
        engine: Engine::Packet,
        ina_min_bytes: cfg.ina_min_bytes,
        unfinished_flows: measured - flows.len(),
        flows,
        jobs,
        iterations,
        iteration_starts,
        link_samples,
        link_utilisation,
        carried_load,
        background_load: cfg.background_load,
        events: stats.events,
        wall_s: t0.elapsed().as_secs_f64(),
        counters: vec![
            ("drops", stats.drops as f64),
            ("ecn_marks", stats.ecn_marks as f64),
            ("timeouts", stats.timeouts as f64),
            ("delivered_bytes", stats.delivered_bytes as f64),
            ("ina_wrong_results", stats.ina.wrong_results as f64),
            ("pfc_pauses", pfc.pauses as f64),
            ("pfc_links_paused", pfc.links_paused as f64),
            // Fraction of all link-time spent paused (whole run).
            ("pfc_paused_fraction", seconds(pfc.paused_ps) / link_time),
        ],
    })
}
