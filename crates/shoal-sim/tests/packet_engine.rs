//! The packet engine against hand-computed results, the alpha-beta model,
//! and its own invariants (determinism, conservation, DCTCP fairness).

use shoal_plan::Collective;
use shoal_sim::dag::{build, DagSpec};
use shoal_sim::engine::{simulate_collective, Engine, Options, Outcome};
use shoal_sim::packet::{Completion, PacketConfig, PacketSim};
use shoal_sim::topology::{LinkSpec, Topology};
use shoal_sim::units::{Rate, PS_PER_MS, PS_PER_US};

/// 10 Gb/s, 1 us, 600 KB.
fn spec() -> LinkSpec {
    LinkSpec {
        rate: Rate::gbit(10),
        latency: PS_PER_US,
        buffer: 600_000,
    }
}

/// Seconds per payload byte: 1500 B on the wire carry 1460.
const BETA: f64 = 1500.0 / 1460.0 * 8.0 / 10e9;

fn collective(topo: &str, algo: &str, ranks: usize, bytes: u64, cfg: PacketConfig) -> Outcome {
    let topo = Topology::parse(topo, spec()).unwrap();
    let mut s = DagSpec::new(Collective::Allreduce, algo, ranks, bytes);
    s.chunk_bytes = 1 << 30; // one message per block: the textbook schedule
    let dag = build(&s, None).unwrap();
    let opts = Options { packet: cfg };
    simulate_collective(&topo, dag, Engine::Packet, &opts).unwrap()
}

fn assert_close(got: f64, expect: f64, tolerance: f64, what: &str) {
    let err = (got - expect).abs() / expect;
    assert!(
        err < tolerance,
        "{what}: simulated {got:.6e} s, expected {expect:.6e} s ({:.1}% off)",
        err * 100.0
    );
}

#[test]
fn one_packet_crosses_a_star_in_two_serialisations_and_two_latencies() {
    let topo = Topology::single_switch(2, spec()).unwrap();
    let mut sim = PacketSim::new(&topo, PacketConfig::default());
    let f = sim.add_flow(0, 1, 1460, 0);
    sim.run();
    // 1500 B at 10 Gb/s = 1.2 us per hop, two hops, 1 us each.
    assert_eq!(sim.flow_finish(f), Some(2 * 1_200_000 + 2 * PS_PER_US));
}

#[test]
fn fat_tree_paths_cost_what_their_hops_cost() {
    let topo = Topology::fat_tree(4, spec()).unwrap();
    let mut sim = PacketSim::new(&topo, PacketConfig::default());
    let same_tor = sim.add_flow(0, 1, 1460, 0);
    let same_pod = sim.add_flow(4, 6, 1460, 0);
    let across = sim.add_flow(8, 15, 1460, 0);
    // Ten packets pipeline: the first arrives after the path, the rest
    // follow one serialisation apart.
    let ten = sim.add_flow(2, 12, 10 * 1460, 0);
    sim.run();
    let hop = 1_200_000 + PS_PER_US;
    assert_eq!(sim.flow_finish(same_tor), Some(2 * hop));
    assert_eq!(sim.flow_finish(same_pod), Some(4 * hop));
    assert_eq!(sim.flow_finish(across), Some(6 * hop));
    assert_eq!(sim.flow_finish(ten), Some(6 * hop + 9 * 1_200_000));
}

#[test]
fn ring_allreduce_matches_alpha_beta_on_a_star_and_a_fat_tree() {
    for (topo, hops) in [("star:hosts=8", 2.0), ("fattree:k=4", 6.0)] {
        let out = collective(topo, "ring", 8, 8 << 20, PacketConfig::default());
        let (p, n) = (8.0, (8u64 << 20) as f64);
        // Per round: the path's latency and store-and-forward of one
        // packet (alpha) plus one block (beta).
        let alpha = hops * 1e-6 + (hops - 1.0) * 1.2e-6;
        let expect = 2.0 * (p - 1.0) * (alpha + n / p * BETA);
        assert_close(out.time_s(), expect, 0.05, topo);
        assert_eq!(
            out.packet.delivered_bytes, out.bytes,
            "{topo}: every byte sent is received once"
        );
        assert_eq!(out.packet.drops, 0);
    }
}

#[test]
fn rabenseifner_allreduce_matches_alpha_beta() {
    let out = collective(
        "star:hosts=8",
        "rabenseifner",
        8,
        8 << 20,
        PacketConfig::default(),
    );
    let (p, n) = (8.0_f64, (8u64 << 20) as f64);
    let alpha = 2.0 * 1e-6 + 1.2e-6;
    let expect = 2.0 * p.log2() * alpha + 2.0 * (p - 1.0) / p * n * BETA;
    assert_close(out.time_s(), expect, 0.05, "rabenseifner");
    assert_eq!(out.packet.delivered_bytes, out.bytes);
}

#[test]
fn runs_are_deterministic_for_a_seed() {
    let cfg = PacketConfig {
        loss: 0.001,
        seed: 3,
        ..PacketConfig::default()
    };
    let a = collective("fattree:k=4", "ring", 16, 2 << 20, cfg);
    let b = collective("fattree:k=4", "ring", 16, 2 << 20, cfg);
    assert_eq!((a.time, a.events, a.packet), (b.time, b.events, b.packet));
    assert!(a.packet.drops > 0, "losses were drawn");
    let c = collective(
        "fattree:k=4",
        "ring",
        16,
        2 << 20,
        PacketConfig { seed: 4, ..cfg },
    );
    assert_ne!(
        (a.time, a.events),
        (c.time, c.events),
        "another seed, other paths and losses"
    );
}

#[test]
fn every_byte_is_delivered_once_despite_loss() {
    let cfg = PacketConfig {
        loss: 0.01,
        seed: 1,
        ..PacketConfig::default()
    };
    for algo in ["ring", "rabenseifner", "recursive_doubling", "hierarchical"] {
        let out = collective("fattree:k=4", algo, 16, 1 << 20, cfg);
        assert!(out.packet.drops > 0, "{algo}: no loss happened");
        assert_eq!(out.packet.delivered_bytes, out.bytes, "{algo}");
    }
}

#[test]
fn dctcp_flows_converge_to_fair_shares_on_a_dumbbell() {
    // Two hosts per leaf, one spine: h0->h2 and h1->h3 share leaf0->spine.
    let topo = Topology::leaf_spine(2, 1, 2, spec()).unwrap();
    let mut sim = PacketSim::new(&topo, PacketConfig::default());
    let a = sim.add_flow(0, 2, 100 << 20, 0);
    let b = sim.add_flow(1, 3, 100 << 20, 5 * PS_PER_MS);
    // The late flow's slow start overshoots (drops, a timeout); DCTCP
    // evens the shares out within some 30 ms (g = 1/16).
    sim.run_until(40 * PS_PER_MS);
    let (a0, b0) = (sim.flow_delivered(a), sim.flow_delivered(b));
    sim.run_until(60 * PS_PER_MS);
    let (da, db) = (sim.flow_delivered(a) - a0, sim.flow_delivered(b) - b0);
    let share = |d: u64| d as f64 * 8.0 / 20e-3 / 10e9;
    let (sa, sb) = (share(da), share(db));
    assert!(
        (sa - sb).abs() < 0.1,
        "shares {sa:.3} and {sb:.3} of the link"
    );
    assert!(sa + sb > 0.9, "the link stays busy: {:.3}", sa + sb);
    assert!(sim.stats().ecn_marks > 0, "DCTCP was driven by marks");
}

#[test]
fn the_papers_fat_tree_runs_and_local_flows_skip_the_network() {
    let topo = Topology::fat_tree(16, spec()).unwrap();
    let mut sim = PacketSim::new(&topo, PacketConfig::default());
    let across = sim.add_flow(0, 1023, 1460, 0);
    let local = sim.add_flow(5, 5, 1 << 20, 7);
    sim.run();
    assert_eq!(sim.flow_finish(across), Some(6 * (1_200_000 + PS_PER_US)));
    assert_eq!(sim.flow_finish(local), Some(7));
}

#[test]
fn completions_drive_closed_loops() {
    // A training-like loop: each iteration's allreduce starts 100 us
    // after the previous one ends.
    let topo = Topology::single_switch(4, spec()).unwrap();
    let mut s = DagSpec::new(Collective::Allreduce, "ring", 4, 1 << 20);
    s.chunk_bytes = 1 << 30;
    let mut sim = PacketSim::new(&topo, PacketConfig::default());
    let local = sim.add_flow(2, 2, 100, 0);
    let mut id = sim.add_collective(build(&s, None).unwrap(), 0).unwrap();
    let mut ends = Vec::new();
    while let Some(c) = sim.run_until_completion(u64::MAX) {
        match c {
            Completion::Flow(f) => assert_eq!((f, sim.now()), (local, 0)),
            Completion::Collective(c) => {
                assert_eq!(c, id);
                ends.push(sim.now());
                if ends.len() < 3 {
                    let next = sim.now() + 100 * PS_PER_US;
                    id = sim.add_collective(build(&s, None).unwrap(), next).unwrap();
                }
            }
            Completion::Ina(_) => unreachable!(),
        }
    }
    assert_eq!(ends.len(), 3);
    // Warm connections: later iterations take no longer than the first.
    let first = ends[0];
    for w in ends.windows(2) {
        assert!(w[1] - w[0] - 100 * PS_PER_US <= first, "{ends:?}");
    }
}

#[test]
fn host_overhead_delays_every_message_once() {
    // 2-rank ring allreduce of two 1460-byte blocks: reduce-scatter then
    // allgather, one single-packet message each way per step. Each message
    // waits the overhead after its dependencies, then crosses the star in
    // two serialisations (1500 B at 10 Gb/s: 1.2 us) and two latencies.
    let overhead = 100 * PS_PER_US;
    let cfg = PacketConfig {
        host_overhead: overhead,
        ..PacketConfig::default()
    };
    let out = collective("star:hosts=2", "ring", 2, 2 * 1460, cfg);
    let crossing = 2 * 1_200_000 + 2 * PS_PER_US;
    assert_eq!(out.time, 2 * (overhead + crossing));
    let without = collective("star:hosts=2", "ring", 2, 2 * 1460, PacketConfig::default());
    assert!(without.time < 2 * crossing + PS_PER_US, "{}", without.time);
}
