//! The packet engine against hand-computed results, the alpha-beta model,
//! and its own invariants (determinism, conservation).

use shoal_plan::Collective;
use shoal_sim::dag::{build, DagSpec};
use shoal_sim::engine::{simulate_collective, Engine, Options};
use shoal_sim::packet::{PacketConfig, PacketSim};
use shoal_sim::topology::{LinkSpec, Topology};
use shoal_sim::units::{Rate, PS_PER_US};

fn spec() -> LinkSpec {
    LinkSpec {
        rate: Rate::gbit(10),
        latency: PS_PER_US,
        buffer: 600_000,
    }
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
fn ring_allreduce_on_a_star_matches_alpha_beta() {
    let topo = Topology::single_switch(8, spec()).unwrap();
    let mut s = DagSpec::new(Collective::Allreduce, "ring", 8, 8 << 20);
    s.chunk_bytes = 1 << 30;
    let dag = build(&s, None).unwrap();
    let out = simulate_collective(&topo, dag, Engine::Packet, &Options::default()).unwrap();
    let p = 8.0;
    let block = (8u64 << 20) as f64 / p;
    // beta per payload byte, with 40 B of header per 1460 B of payload.
    let beta = 1500.0 / 1460.0 * 8.0 / 10e9;
    let expect = 2.0 * (p - 1.0) * block * beta;
    let got = out.time_s();
    assert!(
        (got - expect).abs() / expect < 0.05,
        "simulated {got} s, alpha-beta {expect} s"
    );
    assert_eq!(
        out.packet.delivered_bytes, out.bytes,
        "every byte sent is received once"
    );
    assert_eq!(out.packet.drops, 0);
}
