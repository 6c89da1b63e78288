//! In-network aggregation at flow level (PANAMA's model, section 4).
//!
//! A job's gradient is spread over `T` aggregation trees (round robin in
//! the packet engine, so each tree carries 1/T of it). A tree is the union
//! of the workers' up-paths to a root switch that reaches them all at the
//! least height, plus the same links downwards for the results — the rule
//! the packet engine uses (crate::packet::ina), roots taken in node order.
//!
//! At flow level one tree is ONE flow over all its links: PANAMA's workers
//! grow and shrink one window per tree in lock step (the result is the ACK
//! and carries the OR of every ECN bit), so every link of the tree carries
//! the tree's single stream at one common rate, which is max-min fair
//! against the other flows of each link — what a DCTCP-compatible control
//! converges to. Variants:
//! - PANAMA: weight 1, rate capped by `cwnd_cap` = min over the tree's
//!   switches of memory / jobs there, per round trip;
//! - SwitchML*-like (no congestion control): the tree does not back off;
//!   modelled as a large weight in the sharing;
//! - partial aggregation (PANAMA-0.88/0.94): the switches go on without the
//!   slowest (1 - quorum) of the workers, so the tree leaves out the access
//!   links of the workers whose links are the most loaded when the round
//!   starts and is not slowed to their pace.

use std::collections::BTreeSet;

use crate::error::SimError;
use crate::flow::network::PACKET_BYTES;
use crate::topology::{Node, NodeId, Topology};
use crate::units::seconds;

/// Weight of an aggregation flow without congestion control: it takes
/// that many fair shares on a link (CHOSEN; "does not back off").
pub const NO_CC_WEIGHT: f64 = 16.0;

/// How a job aggregates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InaMode {
    /// PANAMA's congestion control (false: SwitchML*-like).
    pub congestion_control: bool,
    /// Fraction of workers a switch waits for (1.0: all).
    pub quorum: f64,
}

impl InaMode {
    pub const PANAMA: InaMode = InaMode {
        congestion_control: true,
        quorum: 1.0,
    };
    pub const SWITCHML: InaMode = InaMode {
        congestion_control: false,
        quorum: 1.0,
    };
}

/// One aggregation tree.
#[derive(Clone, Debug, PartialEq)]
pub struct AggTree {
    pub root: NodeId,
    /// Up links (worker -> root) then down links (root -> worker), deduplicated.
    pub links: Vec<u32>,
    /// For each worker, its access links (host -> ToR and back).
    pub access: Vec<[u32; 2]>,
    pub switches: Vec<NodeId>,
    /// Links from the root to the farthest worker.
    pub height: usize,
    /// Propagation and store-and-forward up and back down, seconds.
    pub round_trip_s: f64,
}

/// The switches reaching every worker at the least height, in node order.
pub fn roots(topo: &Topology, workers: &[usize]) -> Vec<NodeId> {
    let height = |s: NodeId| workers.iter().map(|&w| topo.hops(s, w)).max().unwrap_or(0);
    let switches = topo.hosts()..topo.nodes.len();
    let best = switches.clone().map(height).min().unwrap_or(0);
    switches.filter(|&s| height(s) == best).collect()
}

/// The link from `from` to `to`.
fn link_between(topo: &Topology, from: NodeId, to: NodeId) -> u32 {
    topo.out_links(from)
        .iter()
        .copied()
        .find(|&l| topo.links[l].to == to)
        .expect("adjacent nodes") as u32
}

/// Up to `count` trees for `workers` (fewer if there are fewer roots).
pub fn build_trees(
    topo: &Topology,
    workers: &[usize],
    count: usize,
) -> Result<Vec<AggTree>, SimError> {
    if workers.is_empty() || count == 0 {
        return Err(SimError::NoAggregation);
    }
    let candidates = roots(topo, workers);
    Ok(candidates
        .iter()
        .take(count)
        .map(|&root| build_tree(topo, workers, root))
        .collect())
}

fn build_tree(topo: &Topology, workers: &[usize], root: NodeId) -> AggTree {
    let dist = distances_to(topo, root);
    let mut up = BTreeSet::new();
    let mut switches = BTreeSet::from([root]);
    let mut access = Vec::with_capacity(workers.len());
    let mut height = 0;
    for &w in workers {
        // Walk up from the worker: at each node the first link one hop
        // closer to the root (the packet engine's choice).
        let mut node = w;
        while node != root {
            let l = topo
                .out_links(node)
                .iter()
                .copied()
                .find(|&l| dist[topo.links[l].to] + 1 == dist[node])
                .expect("a shortest path to the root");
            let next = topo.links[l].to;
            if node == w {
                access.push([l as u32, link_between(topo, next, node)]);
            }
            up.insert(l as u32);
            switches.insert(next);
            node = next;
        }
        height = height.max(dist[w] as usize);
    }
    let reverse =
        |l: u32| link_between(topo, topo.links[l as usize].to, topo.links[l as usize].from);
    let down: Vec<u32> = up.iter().map(|&l| reverse(l)).collect();
    let mut links: Vec<u32> = up.into_iter().collect();
    links.extend(down);
    let first = &topo.links[links[0] as usize];
    let hop = first.latency + first.rate.serialize(PACKET_BYTES);
    AggTree {
        root,
        links,
        access,
        switches: switches.into_iter().collect(),
        height,
        round_trip_s: seconds(hop) * 2.0 * height as f64,
    }
}

/// Hops from every node to `root` through switches only.
fn distances_to(topo: &Topology, root: NodeId) -> Vec<u32> {
    let mut dist = vec![u32::MAX - 1; topo.nodes.len()];
    dist[root] = 0;
    let mut queue = std::collections::VecDeque::from([root]);
    while let Some(n) = queue.pop_front() {
        for &l in topo.out_links(n) {
            let m = topo.links[l].to;
            if dist[m] == u32::MAX - 1 {
                dist[m] = dist[n] + 1;
                if topo.nodes[m] != Node::Host {
                    queue.push_back(m);
                }
            }
        }
    }
    dist
}

/// One aggregation job alone on `topo` at flow level (the flow arm of
/// `crate::engine::simulate_ina`): one flow per tree carrying its share of
/// the gradient; done when the last tree's result is back.
pub fn simulate_alone(
    topo: &Topology,
    job: &crate::packet::InaJob,
) -> Result<crate::engine::Outcome, SimError> {
    use crate::engine::{Engine, Outcome};
    use crate::flow::network::{link_capacities, wire_bytes};
    use crate::flow::FlowEngine;
    let (t0, c0) = (std::time::Instant::now(), crate::engine::thread_cpu_s());
    let trees = build_trees(topo, &job.workers, job.trees.max(1))?;
    let mut engine = FlowEngine::new(&link_capacities(topo))?;
    let per_tree = wire_bytes(job.bytes.div_ceil(trees.len() as u64));
    for (t, tree) in trees.iter().enumerate() {
        let id = engine.start_flow(
            0.0,
            &tree.links,
            per_tree,
            tree.round_trip_s / 2.0,
            f64::INFINITY,
            t as u64,
        )?;
        engine.set_weight(id, 1.0 / trees.len() as f64);
    }
    let mut end = 0.0;
    while let Some(event) = engine.next_event() {
        if let crate::flow::Event::Delivered { time_s, .. } = event {
            end = time_s;
        }
    }
    Ok(Outcome {
        engine: Engine::Flow,
        time: (end * crate::units::PS_PER_S as f64).round() as crate::units::Time,
        events: engine.events(),
        wall_s: t0.elapsed().as_secs_f64(),
        cpu_s: crate::engine::thread_cpu_s() - c0,
        messages: 0,
        bytes: job.bytes * job.workers.len() as u64,
        packet: Default::default(),
    })
}
