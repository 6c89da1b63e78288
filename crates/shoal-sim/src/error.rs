//! [`SimError`]: why a simulation did not run, for the crate's entry points
//! (`scenario::run`, `plan`, the PANAMA figures, the engines' dispatch). It
//! wraps the typed errors of the parts (units, topologies, scenario keys,
//! DAGs, the flow engine, background traffic) and names what only a run
//! finds out: a job that does not fit its topology, an aggregation job the
//! switches cannot build, a feature an engine does not model, a run that
//! did not finish. Its messages are the ones users have always seen.

use std::fmt;
use std::io;

use crate::dag::DagError;
use crate::engine::UnknownEngine;
use crate::flow::FlowError;
use crate::scenario::config::AlgorithmError;
use crate::scenario::file::ScenarioFileError;
use crate::scenario::ConfigError;
use crate::topology::TopologyError;
use crate::units::UnitError;
use crate::workload::background::TrafficError;

#[derive(Debug)]
pub enum SimError {
    Unit(UnitError),
    Topology(TopologyError),
    Config(ConfigError),
    ScenarioFile(ScenarioFileError),
    Dag(DagError),
    Flow(FlowError),
    Traffic(TrafficError),
    Engine(UnknownEngine),
    /// A PANAMA variant's quorum refused.
    Algorithm(AlgorithmError),
    /// A name that is no collective.
    UnknownCollective(String),
    /// A name that is no PANAMA variant.
    UnknownVariant(String),
    /// A file that cannot be written (records, a report).
    Write {
        path: String,
        error: io::Error,
    },

    /// A collective's rank placed on a host the topology lacks.
    RankOutside {
        host: usize,
        topology: String,
        hosts: usize,
    },
    /// A trace's flow between hosts the topology lacks.
    TraceOutside {
        src: u32,
        dst: u32,
        topology: String,
        hosts: usize,
    },
    /// More hosts needed for `ranks` at `ranks_per_host` than the topology has.
    TooFewHosts {
        ranks: usize,
        ranks_per_host: usize,
        needed: usize,
        topology: String,
        hosts: usize,
    },
    /// A job of no workers.
    NoWorkers,
    /// Fewer free hosts than a job's workers.
    TooFewFree {
        workers: usize,
        free: usize,
        hosts: usize,
    },
    /// No layer of host slots with room for a job.
    NoRoom {
        workers: usize,
    },
    /// `jobs.N.tree` beyond the job's trees.
    TreeOutside {
        tree: usize,
        trees: usize,
    },
    /// Aggregation trees for no worker, or no tree.
    NoAggregation,
    /// An aggregation job of no workers (packet engine).
    InaNoWorkers,
    /// An aggregation worker on a host the topology lacks.
    InaWorkerOutside {
        host: usize,
        topology: String,
    },
    /// An aggregation job with a host twice.
    InaWorkersNotDistinct,
    /// A quorum outside (0, 1].
    InaQuorum(f64),
    /// A switch with more children in an aggregation tree than the packet
    /// engine models (64).
    TooManyChildren {
        switch: usize,
        children: usize,
    },
    /// No path from a worker up to a tree's root switch.
    NoPath {
        host: usize,
        switch: usize,
    },
    /// `--algo ina` for another collective than allreduce.
    InaNotAllreduce(String),

    /// PFC asked of the flow engine.
    PfcNeedsPacketEngine,
    /// `--host-overhead` asked of the flow engine.
    HostOverheadNeedsPacketEngine,

    /// A collective whose last message never arrived.
    CollectiveUnfinished,
    /// An aggregation job whose result never came back.
    InaUnfinished,
    /// Aggregation results that were not the sum.
    WrongResults(u64),
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Unit(e) => write!(f, "{e}"),
            SimError::Topology(e) => write!(f, "{e}"),
            SimError::Config(e) => write!(f, "{e}"),
            SimError::ScenarioFile(e) => write!(f, "{e}"),
            SimError::Dag(e) => write!(f, "{e}"),
            SimError::Flow(e) => write!(f, "{e}"),
            SimError::Traffic(e) => write!(f, "{e}"),
            SimError::Engine(e) => write!(f, "{e}"),
            SimError::Algorithm(e) => write!(f, "{e}"),
            SimError::UnknownCollective(name) => {
                let names: Vec<_> = shoal_plan::Collective::ALL
                    .iter()
                    .map(|c| c.name())
                    .collect();
                write!(
                    f,
                    "unknown collective '{name}'; valid: {}",
                    names.join(", ")
                )
            }
            SimError::UnknownVariant(name) => write!(
                f,
                "unknown PANAMA variant {name:?} (ideal, ring, switchml, panama, panama-0.88, panama-0.94)"
            ),
            SimError::Write { path, error } => write!(f, "{path}: {error}"),
            SimError::RankOutside {
                host,
                topology,
                hosts,
            } => write!(
                f,
                "rank placed on host {host}, but {topology} has {hosts} hosts"
            ),
            SimError::TraceOutside {
                src,
                dst,
                topology,
                hosts,
            } => write!(
                f,
                "background.trace: a flow from host {src} to {dst}, but {topology} has {hosts} hosts"
            ),
            SimError::TooFewHosts {
                ranks,
                ranks_per_host,
                needed,
                topology,
                hosts,
            } => write!(
                f,
                "{ranks} ranks at {ranks_per_host} per host need {needed} hosts; {topology} has {hosts}"
            ),
            SimError::NoWorkers => write!(f, "a job needs at least one worker"),
            SimError::TooFewFree {
                workers,
                free,
                hosts,
            } => write!(
                f,
                "cannot place {workers} workers: only {free} of {hosts} hosts are free"
            ),
            SimError::NoRoom { workers } => write!(f, "no room for a job of {workers} workers"),
            SimError::TreeOutside { tree, trees } => write!(
                f,
                "tree {tree} asked for, but the job has {trees} trees"
            ),
            SimError::NoAggregation => {
                write!(f, "aggregation needs at least one worker and one tree")
            }
            SimError::InaNoWorkers => write!(f, "an aggregation job needs workers"),
            SimError::InaWorkerOutside { host, topology } => {
                write!(f, "worker host {host} is not a host of {topology}")
            }
            SimError::InaWorkersNotDistinct => {
                write!(f, "aggregation workers must be distinct hosts")
            }
            SimError::InaQuorum(q) => write!(f, "quorum must be in (0, 1], got {q}"),
            SimError::TooManyChildren { switch, children } => write!(
                f,
                "switch {switch} has {children} children in an aggregation tree; at most 64 are modelled"
            ),
            SimError::NoPath { host, switch } => {
                write!(f, "no path from host {host} to switch {switch}")
            }
            SimError::InaNotAllreduce(collective) => {
                write!(f, "--algo ina is an allreduce; not {collective}")
            }
            SimError::PfcNeedsPacketEngine => write!(
                f,
                "pfc needs engine = \"packet\" (the flow engine has no queues to pause)"
            ),
            SimError::HostOverheadNeedsPacketEngine => {
                write!(f, "--host-overhead is modelled by the packet engine only")
            }
            SimError::CollectiveUnfinished => write!(
                f,
                "the collective did not finish (a message was never delivered)"
            ),
            SimError::InaUnfinished => write!(
                f,
                "the aggregation job did not finish (a result never came back)"
            ),
            SimError::WrongResults(n) => write!(f, "{n} aggregation results were wrong"),
        }
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimError::Unit(e) => Some(e),
            SimError::Topology(e) => Some(e),
            SimError::Config(e) => Some(e),
            SimError::ScenarioFile(e) => Some(e),
            SimError::Dag(e) => Some(e),
            SimError::Flow(e) => Some(e),
            SimError::Traffic(e) => Some(e),
            SimError::Engine(e) => Some(e),
            SimError::Algorithm(e) => Some(e),
            SimError::Write { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// `?` on a part's error inside an entry point.
macro_rules! wraps {
    ($($part:ident($error:ty)),* $(,)?) => {
        $(impl From<$error> for SimError {
            fn from(e: $error) -> SimError {
                SimError::$part(e)
            }
        })*
    };
}

wraps!(
    Unit(UnitError),
    Topology(TopologyError),
    Config(ConfigError),
    ScenarioFile(ScenarioFileError),
    Dag(DagError),
    Flow(FlowError),
    Traffic(TrafficError),
    Engine(UnknownEngine),
    Algorithm(AlgorithmError),
);
