//! Running a scenario on the flow engine: background flows, training jobs
//! iterating compute -> allreduce (a shoal plan's DAG or in-network
//! aggregation trees), until the configured duration.

use shoal_plan::Collective;

use super::config::{Algorithm, JobConfig, ScenarioConfig};
use super::ina::{build_trees, AggTree, InaMode, NO_CC_WEIGHT};
use crate::dag::{build_with, BuiltinOnly, CollectiveDag, DagSpec, PlanSource};
use crate::engine::Engine;
use crate::error::SimError;
use crate::flow::collective::RunningDag;
use crate::flow::network::{link_capacities, route, wire_bytes, PACKET_BYTES};
use crate::flow::{Event, FlowEngine};
use crate::topology::{mix, Topology};
use crate::workload::{models, place_close, BackgroundFlow, PoissonTraffic, Rng};

const BACKGROUND: u64 = 1 << 63;
const TREE: u64 = 1 << 39;
const LONG: u64 = 1 << 62;
const END_TIMER: u64 = u64::MAX;
const SAMPLE_TIMER: u64 = u64::MAX - 1;

/// How one job reduces, once placed.
pub enum Comm {
    Dag(Box<CollectiveDag>),
    Ina { trees: Vec<AggTree>, mode: InaMode },
}

/// A placed job.
pub struct PlacedJob {
    pub config: JobConfig,
    pub hosts: Vec<usize>,
    pub comm: Comm,
    /// Fraction of the cluster's host-link capacity it offers (ring estimate).
    pub offered_load: f64,
}

impl PlacedJob {
    /// Whether PANAMA aggregates this job's gradient in the network (it is
    /// over `ina_min_bytes`): the jobs whose training time the paper
    /// compares, whatever algorithm this run gives them.
    pub fn aggregated(&self, ina_min_bytes: u64) -> bool {
        self.config.model.gradient_bytes() > ina_min_bytes
    }

    pub fn algorithm_name(&self) -> String {
        match &self.comm {
            Comm::Dag(dag) => dag.algorithm.clone(),
            Comm::Ina { mode, .. } if !mode.congestion_control => "switchml".into(),
            Comm::Ina { mode, .. } if mode.quorum < 1.0 => format!("panama-{}", mode.quorum),
            Comm::Ina { .. } => "panama".into(),
        }
    }
}

/// One finished background flow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlowRecord {
    pub start_s: f64,
    pub bytes: u64,
    pub fct_s: f64,
    pub src: u32,
    pub dst: u32,
}

/// Cumulative bytes every link had carried at evenly spaced instants, for
/// utilisation over time (`links.csv`).
#[derive(Clone, Debug, Default)]
pub struct LinkSamples {
    pub times_s: Vec<f64>,
    /// `bytes[i][l]`: bytes link `l` had carried at `times_s[i]`.
    pub bytes: Vec<Vec<f64>>,
    /// (from, to) node and rate (bit/s) of every link.
    pub ends: Vec<(usize, usize)>,
    pub rates_bps: Vec<f64>,
    /// Nodes below this id are hosts.
    pub hosts: usize,
}

impl LinkSamples {
    pub(super) fn new(topo: &Topology) -> Self {
        LinkSamples {
            ends: topo.links.iter().map(|l| (l.from, l.to)).collect(),
            rates_bps: topo.links.iter().map(|l| l.rate.bits_per_s()).collect(),
            hosts: topo.hosts(),
            ..LinkSamples::default()
        }
    }
}

/// Samples of link bytes per run (`links.csv` has this many rows per link).
pub const LINK_SAMPLES: usize = 100;

/// Everything a run measured. Flows and iterations that start in the
/// warm-up are left out, and link bytes are counted after it (the link
/// samples alone cover the whole run, warm-up included).
pub struct ScenarioResult {
    pub duration_s: f64,
    pub warmup_s: f64,
    pub engine: Engine,
    /// Only gradients above this are aggregated (see [`PlacedJob::aggregated`]).
    pub ina_min_bytes: u64,
    pub flows: Vec<FlowRecord>,
    pub unfinished_flows: usize,
    pub jobs: Vec<PlacedJob>,
    /// Completed iteration times (compute + communication) per job.
    pub iterations: Vec<Vec<f64>>,
    /// When each of those iterations started (its compute began).
    pub iteration_starts: Vec<Vec<f64>>,
    pub link_samples: LinkSamples,
    pub link_utilisation: Vec<f64>,
    /// Mean utilisation of the hosts' uplinks after the warm-up: the load
    /// the network carried, next to the load offered.
    pub carried_load: f64,
    pub background_load: f64,
    pub events: u64,
    pub wall_s: f64,
    /// The engine's own counters (drops, ECN marks, PFC pauses, ...).
    pub counters: Vec<(&'static str, f64)>,
}

/// Per-link utilisation between two snapshots of the links' bytes, and the
/// mean over the hosts' uplinks (the carried load).
pub(super) fn utilisation(
    topo: &Topology,
    before: &[f64],
    after: &[f64],
    seconds: f64,
) -> (Vec<f64>, f64) {
    let per_link: Vec<f64> = topo
        .links
        .iter()
        .enumerate()
        .map(|(i, l)| (after[i] - before[i]) * 8.0 / (l.rate.bits_per_s() * seconds))
        .collect();
    let uplinks: Vec<f64> = (0..topo.hosts())
        .map(|h| per_link[topo.out_links(h)[0]])
        .collect();
    let carried = uplinks.iter().sum::<f64>() / uplinks.len().max(1) as f64;
    (per_link, carried)
}

/// The scenario's topology, with its per-tier link rates if it has any.
pub(super) fn topology(cfg: &ScenarioConfig) -> Result<Topology, SimError> {
    let mut topo = Topology::parse(&cfg.topology, cfg.link)?;
    if !cfg.tier_rates.is_empty() {
        topo.set_tier_rates(&cfg.tier_rates)?;
    }
    Ok(topo)
}

/// The background flows of a run, all drawn up front: each distribution
/// carries an equal share of the background load, then the trace's flows
/// (`background.trace`) are replayed as given.
pub(super) fn background_flows(
    cfg: &ScenarioConfig,
    topo: &Topology,
) -> Result<Vec<BackgroundFlow>, SimError> {
    let mut background = Vec::new();
    if cfg.background_load > 0.0 {
        let link_bps = cfg.host_bps();
        let share = cfg.background_load / cfg.distributions.len() as f64;
        for (d, cdf) in cfg.distributions.iter().enumerate() {
            let traffic = PoissonTraffic::new(topo.hosts() as u32, link_bps, share, cdf.clone())?;
            background.extend(
                traffic.generate(cfg.duration_s, &mut Rng::derive(cfg.seed, 100 + d as u64)),
            );
        }
    }
    if let Some(f) = cfg
        .trace
        .iter()
        .find(|f| f.src.max(f.dst) as usize >= topo.hosts())
    {
        return Err(SimError::TraceOutside {
            src: f.src,
            dst: f.dst,
            topology: topo.name.clone(),
            hosts: topo.hosts(),
        });
    }
    background.extend(cfg.trace.iter().cloned());
    Ok(background)
}

/// Endpoints of the persistent long flows: hosts that run no worker
/// (PANAMA Fig. 9: other nodes generate them), or any hosts if fewer than
/// two are idle.
pub(super) fn long_flow_pairs(
    cfg: &ScenarioConfig,
    topo: &Topology,
    jobs: &[PlacedJob],
) -> Vec<(usize, usize)> {
    let mut pairs = Rng::derive(cfg.seed, 4);
    let mut idle: Vec<usize> = (0..topo.hosts())
        .filter(|h| !jobs.iter().any(|j| j.hosts.contains(h)))
        .collect();
    if idle.len() < 2 {
        idle = (0..topo.hosts()).collect();
    }
    (0..cfg.long_flows)
        .map(|_| {
            let n = idle.len() as u64;
            let a = pairs.below(n) as usize;
            (
                idle[a],
                idle[(a + 1 + pairs.below(n - 1) as usize) % n as usize],
            )
        })
        .collect()
}

/// When each job first finishes computing: jobs start at a random offset
/// within one iteration (returned as the first iteration's start).
pub(super) fn first_iterations(cfg: &ScenarioConfig, jobs: &[PlacedJob]) -> Vec<f64> {
    let mut rng = Rng::derive(cfg.seed, 3);
    jobs.iter()
        .map(|job| rng.next_f64() * job.config.model.compute_s)
        .collect()
}

/// Offered load of a ring allreduce job: each worker sends 2(W-1)/W of the
/// gradient per iteration; idealised iteration = compute + that at line rate.
fn ring_offered_load(workers: usize, model: &models::Model, link_bps: f64, hosts: usize) -> f64 {
    let w = workers as f64;
    let comm = 2.0 * (w - 1.0) / w * model.gradient_bytes() as f64 * 8.0 / link_bps;
    w * comm / (comm + model.compute_s) / hosts as f64
}

/// Host slots: `slots[layer][host]` free? A job takes distinct hosts of
/// one layer, the lowest layer that fits it.
struct Slots {
    layers: Vec<Vec<bool>>,
}

impl Slots {
    fn place(
        &mut self,
        workers: usize,
        close: bool,
        rng: &mut Rng,
    ) -> Result<Vec<usize>, SimError> {
        for free in &mut self.layers {
            if free.iter().filter(|&&f| f).count() < workers {
                continue;
            }
            if close {
                return Ok(place_close(free, workers)?
                    .into_iter()
                    .map(|h| h as usize)
                    .collect());
            }
            let mut ids: Vec<usize> = (0..free.len()).filter(|&h| free[h]).collect();
            for i in 0..workers {
                let j = i + rng.below((ids.len() - i) as u64) as usize;
                ids.swap(i, j);
            }
            ids.truncate(workers);
            ids.sort_unstable();
            for &h in &ids {
                free[h] = false;
            }
            return Ok(ids);
        }
        Err(SimError::NoRoom { workers })
    }
}

fn setup_job(
    cfg: &ScenarioConfig,
    topo: &Topology,
    job: JobConfig,
    hosts: Vec<usize>,
    source: &dyn PlanSource,
) -> Result<PlacedJob, SimError> {
    let bytes = job.model.gradient_bytes();
    let plan = |name: &str| -> Result<Comm, SimError> {
        let mut spec = DagSpec::new(Collective::Allreduce, name, hosts.len(), bytes);
        spec.chunk_bytes = cfg.chunk_bytes;
        let dag = build_with(&spec, Some(hosts.clone()), source)?;
        Ok(Comm::Dag(Box::new(dag)))
    };
    let comm = match &job.algorithm {
        Algorithm::Plan(name) => plan(name)?,
        Algorithm::Ina(_) if bytes <= cfg.ina_min_bytes => plan(&cfg.fallback)?,
        Algorithm::Ina(mode) => {
            let mut trees = build_trees(topo, &hosts, job.trees)?;
            // PANAMA Fig. 9's Agg1..Agg4: all the data on one of the trees.
            if let Some(t) = job.only_tree {
                if t >= trees.len() {
                    return Err(SimError::TreeOutside {
                        tree: t,
                        trees: trees.len(),
                    });
                }
                trees = vec![trees.swap_remove(t)];
            }
            Comm::Ina { trees, mode: *mode }
        }
    };
    let link_bps = cfg.host_bps();
    Ok(PlacedJob {
        offered_load: ring_offered_load(hosts.len(), &job.model, link_bps, topo.hosts()),
        config: job,
        hosts,
        comm,
    })
}

/// Places the configured jobs, then random ones up to the target load.
pub fn place_jobs(cfg: &ScenarioConfig, topo: &Topology) -> Result<Vec<PlacedJob>, SimError> {
    place_jobs_with(cfg, topo, &BuiltinOnly)
}

/// As [`place_jobs`], with `source` supplying the allreduce algorithms
/// the built-in registry does not have (registered from Python).
pub fn place_jobs_with(
    cfg: &ScenarioConfig,
    topo: &Topology,
    source: &dyn PlanSource,
) -> Result<Vec<PlacedJob>, SimError> {
    let mut slots = Slots {
        layers: vec![vec![true; topo.hosts()]; cfg.slots_per_host],
    };
    let mut rng = Rng::derive(cfg.seed, 2);
    let mut placed = Vec::new();
    for job in &cfg.jobs {
        let hosts = slots.place(job.workers, job.close, &mut rng)?;
        placed.push(setup_job(cfg, topo, job.clone(), hosts, source)?);
    }
    if let Some(r) = &cfg.random_jobs {
        let link_bps = cfg.host_bps();
        let mut load: f64 = placed.iter().map(|j: &PlacedJob| j.offered_load).sum();
        let mut misses = 0;
        while load < r.load && misses < 100 {
            let workers = models::draw_workers(&mut rng) as usize;
            let model = r.models.draw(&mut rng);
            // A job that would overshoot the target by more than half its
            // own load is skipped (small clusters: one job is a lot).
            let extra =
                ring_offered_load(workers.min(topo.hosts()), &model, link_bps, topo.hosts());
            if load + extra > r.load + extra / 2.0 {
                misses += 1;
                continue;
            }
            let Ok(hosts) = slots.place(workers.min(topo.hosts()), true, &mut rng) else {
                break; // the cluster is full: the load reached is reported
            };
            let job = JobConfig {
                workers: hosts.len(),
                model,
                algorithm: r.algorithm.clone(),
                trees: r.trees,
                close: true,
                only_tree: None,
            };
            load += ring_offered_load(hosts.len(), &model, link_bps, topo.hosts());
            placed.push(setup_job(cfg, topo, job, hosts, source)?);
        }
    }
    Ok(placed)
}

/// Aggregation memory share per job at each switch: `memory / jobs`.
fn memory_caps(cfg: &ScenarioConfig, topo: &Topology, jobs: &[PlacedJob]) -> Vec<f64> {
    let mut jobs_at = vec![0u32; topo.nodes.len()];
    for job in jobs {
        if let Comm::Ina { trees, .. } = &job.comm {
            let mut switches: Vec<usize> = trees
                .iter()
                .flat_map(|t| t.switches.iter().copied())
                .collect();
            switches.sort_unstable();
            switches.dedup();
            for s in switches {
                jobs_at[s] += 1;
            }
        }
    }
    jobs_at
        .iter()
        .map(|&n| cfg.switch_memory as f64 / n.max(1) as f64)
        .collect()
}

/// Starts one aggregation round of job `j`: one flow per tree.
fn start_round(
    engine: &mut FlowEngine,
    job: &PlacedJob,
    j: usize,
    memory: &[f64],
    tree_share_each: bool,
    now: f64,
) -> Result<usize, SimError> {
    let Comm::Ina { trees, mode } = &job.comm else {
        unreachable!("INA jobs only")
    };
    let per_tree = wire_bytes(
        job.config
            .model
            .gradient_bytes()
            .div_ceil(trees.len() as u64),
    );
    for (t, tree) in trees.iter().enumerate() {
        // Partial aggregation: leave out the most loaded workers' links.
        let skip = ((1.0 - mode.quorum) * tree.access.len() as f64).floor() as usize;
        let mut excluded = Vec::new();
        if skip > 0 {
            let mut by_load: Vec<(usize, usize)> = tree
                .access
                .iter()
                .enumerate()
                .map(|(w, a)| (engine.active_flows(a[0]) + engine.active_flows(a[1]), w))
                .collect();
            by_load.sort_unstable_by(|a, b| b.cmp(a));
            excluded = by_load[..skip]
                .iter()
                .flat_map(|&(_, w)| tree.access[w])
                .collect();
        }
        let links: Vec<u32> = tree
            .links
            .iter()
            .copied()
            .filter(|l| !excluded.contains(l))
            .collect();
        // cwnd_cap: the smallest memory share on the tree, per round trip.
        let share = tree
            .switches
            .iter()
            .map(|&s| memory[s])
            .fold(f64::INFINITY, f64::min);
        let cap = share * 8.0 / tree.round_trip_s.max(1e-9);
        let tag = ((j as u64 + 1) << 40) | TREE | t as u64;
        let id = engine.start_flow(now, &links, per_tree, tree.round_trip_s / 2.0, cap, tag)?;
        // A worker deals its packets round robin over the trees: at its
        // access link the trees together are one sender, so they split one
        // fair share (greedy ones: NO_CC_WEIGHT shares).
        let weight = if mode.congestion_control {
            1.0
        } else {
            NO_CC_WEIGHT
        };
        // With `tree_share = each`, every tree is its own sender (its own
        // window), a full share on every link.
        let split = if tree_share_each {
            1.0
        } else {
            trees.len() as f64
        };
        engine.set_weight(id, weight / split);
    }
    Ok(trees.len())
}

/// Runs `cfg` on its engine; `progress` gets the simulated fraction done
/// (0..=1).
pub fn run(
    cfg: &ScenarioConfig,
    progress: &mut dyn FnMut(f64),
) -> Result<ScenarioResult, SimError> {
    run_with(cfg, progress, &BuiltinOnly)
}

/// As [`run`], with `source` supplying the jobs' allreduce algorithms the
/// built-in registry does not have (registered from Python).
pub fn run_with(
    cfg: &ScenarioConfig,
    progress: &mut dyn FnMut(f64),
    source: &dyn PlanSource,
) -> Result<ScenarioResult, SimError> {
    match cfg.engine {
        Engine::Flow => run_flow(cfg, progress, source),
        Engine::Packet => super::packet_run::run_with(cfg, progress, source),
    }
}

const WARMUP_TIMER: u64 = u64::MAX - 2;

fn run_flow(
    cfg: &ScenarioConfig,
    progress: &mut dyn FnMut(f64),
    source: &dyn PlanSource,
) -> Result<ScenarioResult, SimError> {
    if cfg.pfc.is_some() {
        return Err(SimError::PfcNeedsPacketEngine);
    }
    let t0 = std::time::Instant::now();
    let topo = topology(cfg)?;
    let jobs = place_jobs_with(cfg, &topo, source)?;
    let mut engine = FlowEngine::new(&link_capacities(&topo))?;
    // DCTCP and PANAMA keep about K packets queued at a busy link; traffic
    // without congestion control fills the buffer.
    engine.set_queues(
        cfg.ecn_k as f64 * PACKET_BYTES as f64,
        cfg.link.buffer as f64,
    );
    engine.set_rate_interval(cfg.rate_interval_s);
    let link_bps = cfg.host_bps();

    // Background flows, all scheduled up front.
    let background = background_flows(cfg, &topo)?;
    for (i, f) in background.iter().enumerate() {
        let r = route(
            &topo,
            f.src as usize,
            f.dst as usize,
            mix(cfg.seed ^ i as u64),
        );
        engine.start_flow(
            f.start_s,
            &r.links,
            wire_bytes(f.bytes),
            r.latency_s,
            f64::INFINITY,
            BACKGROUND | i as u64,
        )?;
    }

    // Persistent long flows, big enough to outlast the run.
    for (i, (src, dst)) in long_flow_pairs(cfg, &topo, &jobs).into_iter().enumerate() {
        let r = route(&topo, src, dst, mix(cfg.seed ^ LONG ^ i as u64));
        let bytes = (link_bps / 8.0 * cfg.duration_s * 2.0) as u64;
        engine.start_flow(
            0.0,
            &r.links,
            bytes,
            r.latency_s,
            f64::INFINITY,
            LONG | i as u64,
        )?;
    }

    let memory = memory_caps(cfg, &topo, &jobs);
    let mut iteration_start = first_iterations(cfg, &jobs);
    let mut iterations = vec![Vec::new(); jobs.len()];
    let mut trees_left = vec![0usize; jobs.len()];
    let mut running: Vec<Option<RunningDag>> = (0..jobs.len()).map(|_| None).collect();
    for (j, job) in jobs.iter().enumerate() {
        engine.timer(iteration_start[j] + job.config.model.compute_s, j as u64);
    }
    engine.timer(cfg.duration_s, END_TIMER);
    let mut warm_bytes = vec![0.0; topo.links.len()];
    if cfg.warmup_s > 0.0 {
        engine.timer(cfg.warmup_s, WARMUP_TIMER);
    }
    let sample_every = cfg.duration_s / LINK_SAMPLES as f64;
    engine.timer(sample_every, SAMPLE_TIMER);
    let mut link_samples = LinkSamples::new(&topo);
    let mut iteration_starts = vec![Vec::new(); jobs.len()];

    let mut flows = Vec::with_capacity(background.len());
    let mut reported = 0.0;
    while let Some(event) = engine.next_event() {
        let now = match event {
            Event::Timer {
                token: END_TIMER,
                time_s,
            } => {
                link_samples.times_s.push(time_s);
                link_samples.bytes.push(engine.link_bytes());
                break;
            }
            Event::Timer {
                token: WARMUP_TIMER,
                time_s,
            } => {
                warm_bytes = engine.link_bytes();
                time_s
            }
            Event::Timer {
                token: SAMPLE_TIMER,
                time_s,
            } => {
                link_samples.times_s.push(time_s);
                link_samples.bytes.push(engine.link_bytes());
                // the last sample is taken at the end
                if time_s + 1.5 * sample_every < cfg.duration_s {
                    engine.timer(time_s + sample_every, SAMPLE_TIMER);
                }
                time_s
            }
            Event::Timer { token, time_s } => {
                // Compute done: the allreduce starts.
                let j = token as usize;
                match &jobs[j].comm {
                    Comm::Dag(dag) => {
                        let mut run =
                            RunningDag::new(&topo, dag, (j as u64 + 1) << 40, mix(j as u64))?;
                        run.start(&mut engine, time_s)?;
                        running[j] = Some(run);
                    }
                    Comm::Ina { .. } => {
                        trees_left[j] = start_round(
                            &mut engine,
                            &jobs[j],
                            j,
                            &memory,
                            cfg.tree_share_each,
                            time_s,
                        )?
                    }
                }
                time_s
            }
            Event::Sent { tag, time_s } => {
                // the next message of a collective's rank pair may go
                if tag & (LONG | BACKGROUND | TREE) == 0 {
                    let j = (tag >> 40) as usize - 1;
                    if let Some(run) = running[j].as_mut() {
                        run.sent(&mut engine, tag, time_s)?;
                    }
                }
                time_s
            }
            Event::Delivered {
                tag,
                start_s,
                time_s,
                ..
            } => {
                if tag & LONG != 0 {
                    // A persistent flow outlived its budget: nothing to record.
                } else if tag & BACKGROUND != 0 {
                    let f = &background[(tag & !BACKGROUND) as usize];
                    if start_s >= cfg.warmup_s {
                        flows.push(FlowRecord {
                            start_s,
                            bytes: f.bytes,
                            fct_s: time_s - start_s,
                            src: f.src,
                            dst: f.dst,
                        });
                    }
                } else {
                    let j = (tag >> 40) as usize - 1;
                    let done = if tag & TREE != 0 {
                        trees_left[j] -= 1;
                        trees_left[j] == 0
                    } else {
                        running[j]
                            .as_mut()
                            .expect("a running allreduce")
                            .delivered(&mut engine, tag, time_s)?
                    };
                    if done {
                        running[j] = None;
                        if iteration_start[j] >= cfg.warmup_s {
                            iterations[j].push(time_s - iteration_start[j]);
                            iteration_starts[j].push(iteration_start[j]);
                        }
                        iteration_start[j] = time_s;
                        engine.timer(time_s + jobs[j].config.model.compute_s, j as u64);
                    }
                }
                time_s
            }
        };
        if now - reported >= cfg.duration_s / 100.0 {
            reported = now;
            progress((now / cfg.duration_s).min(1.0));
        }
    }
    progress(1.0);
    let (link_utilisation, carried_load) = utilisation(
        &topo,
        &warm_bytes,
        &engine.link_bytes(),
        cfg.duration_s - cfg.warmup_s,
    );
    let measured = background
        .iter()
        .filter(|f| f.start_s >= cfg.warmup_s)
        .count();
    Ok(ScenarioResult {
        duration_s: cfg.duration_s,
        warmup_s: cfg.warmup_s,
        engine: Engine::Flow,
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
        events: engine.events(),
        wall_s: t0.elapsed().as_secs_f64(),
        counters: Vec::new(),
    })
}
