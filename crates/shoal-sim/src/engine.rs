//! One collective on one topology, simulated by a chosen engine. Adding an
//! engine is one [`Engine`] variant, its name in [`Engine::parse`], and one
//! arm in [`simulate_collective`].

use std::fmt;
use std::time::Instant;

use crate::dag::CollectiveDag;
use crate::error::SimError;
use crate::packet::{InaJob, PacketConfig, PacketSim, PacketStats};
use crate::topology::Topology;
use crate::units::{seconds, Time};

/// The simulation engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Every packet through every queue (crate::packet).
    Packet,
    /// Max-min fair flow rates (crate::flow, by simflow).
    Flow,
}

/// An engine name that is none of [`Engine::NAMES`], as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownEngine(pub String);

impl fmt::Display for UnknownEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown engine '{}'; valid: {}",
            self.0,
            Engine::NAMES.join(", ")
        )
    }
}

impl std::error::Error for UnknownEngine {}

impl Engine {
    pub const NAMES: [&'static str; 2] = ["packet", "flow"];

    pub fn parse(name: &str) -> Result<Engine, UnknownEngine> {
        match name {
            "packet" => Ok(Engine::Packet),
            "flow" => Ok(Engine::Flow),
            other => Err(UnknownEngine(other.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Engine::Packet => "packet",
            Engine::Flow => "flow",
        }
    }
}

/// Options every engine reads (engines ignore what they do not model).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Options {
    pub packet: PacketConfig,
}

/// What simulating one collective reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub engine: Engine,
    /// Simulated time from start to the last message delivered.
    pub time: Time,
    /// Events handled (packet engine: departures, arrivals, timers).
    pub events: u64,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
    /// CPU seconds the simulating thread used (0 where the OS does not
    /// say): on a loaded machine the honest basis of events per second.
    pub cpu_s: f64,
    pub messages: usize,
    /// Payload bytes the collective moved between hosts.
    pub bytes: u64,
    /// Packet engine counters (zero for other engines).
    pub packet: PacketStats,
}

impl Outcome {
    pub fn time_s(&self) -> f64 {
        seconds(self.time)
    }

    /// Events per CPU second of the simulating thread.
    pub fn events_per_cpu_s(&self) -> f64 {
        if self.cpu_s > 0.0 {
            self.events as f64 / self.cpu_s
        } else {
            0.0
        }
    }

    pub fn events_per_s(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.events as f64 / self.wall_s
        } else {
            0.0
        }
    }
}

/// Simulates `dag` alone on `topo` with `engine`.
pub fn simulate_collective(
    topo: &Topology,
    dag: CollectiveDag,
    engine: Engine,
    opts: &Options,
) -> Result<Outcome, SimError> {
    match engine {
        Engine::Packet => packet_collective(topo, dag, opts),
        Engine::Flow => crate::flow::plan_outcome(topo, &dag),
    }
}

/// Simulates aggregation job `job` alone on `topo` with `engine`.
pub fn simulate_ina(
    topo: &Topology,
    job: InaJob,
    engine: Engine,
    opts: &Options,
) -> Result<Outcome, SimError> {
    match engine {
        Engine::Packet => packet_ina(topo, job, opts),
        Engine::Flow => crate::scenario::ina::simulate_alone(topo, &job),
    }
}

fn packet_ina(topo: &Topology, job: InaJob, opts: &Options) -> Result<Outcome, SimError> {
    let (t0, c0) = (Instant::now(), thread_cpu_s());
    let bytes = job.bytes * job.workers.len() as u64;
    let mut sim = PacketSim::new(topo, opts.packet);
    let id = sim.add_ina_job(job, 0)?;
    let stats = sim.run();
    let time = sim.ina_finish(id).ok_or(SimError::InaUnfinished)?;
    if stats.ina.wrong_results > 0 {
        return Err(SimError::WrongResults(stats.ina.wrong_results));
    }
    Ok(Outcome {
        engine: Engine::Packet,
        time,
        events: stats.events,
        wall_s: t0.elapsed().as_secs_f64(),
        cpu_s: thread_cpu_s() - c0,
        messages: 0,
        bytes,
        packet: stats,
    })
}

fn packet_collective(
    topo: &Topology,
    dag: CollectiveDag,
    opts: &Options,
) -> Result<Outcome, SimError> {
    let (t0, c0) = (Instant::now(), thread_cpu_s());
    let messages = dag.messages.len();
    let bytes = network_bytes(&dag);
    let mut sim = PacketSim::new(topo, opts.packet);
    let id = sim.add_collective(dag, 0)?;
    let stats = sim.run();
    let time = sim
        .collective_finish(id)
        .ok_or(SimError::CollectiveUnfinished)?;
    Ok(Outcome {
        engine: Engine::Packet,
        time,
        events: stats.events,
        wall_s: t0.elapsed().as_secs_f64(),
        cpu_s: thread_cpu_s() - c0,
        messages,
        bytes,
        packet: stats,
    })
}

/// CPU seconds this thread has used (Linux: /proc/thread-self/schedstat,
/// whose first field is nanoseconds on CPU); 0 elsewhere.
pub fn thread_cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9)
}

/// Bytes of the messages whose ranks sit on different hosts.
pub fn network_bytes(dag: &CollectiveDag) -> u64 {
    dag.messages
        .iter()
        .filter(|m| dag.placement[m.src_rank] != dag.placement[m.dst_rank])
        .map(|m| m.bytes)
        .sum()
}
