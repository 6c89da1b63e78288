//! In-network aggregation in the packet engine: exact sums, no double
//! counting under loss, the alpha-beta time of a single switch, trees.

use shoal_sim::packet::{InaJob, PacketConfig, PacketSim};
use shoal_sim::topology::{LinkSpec, Topology};
use shoal_sim::units::seconds;

fn run(
    topo: &Topology,
    job: InaJob,
    cfg: PacketConfig,
) -> (f64, shoal_sim::packet::PacketStats, usize) {
    let mut sim = PacketSim::new(topo, cfg);
    let id = sim.add_ina_job(job, 0).unwrap();
    let stats = sim.run();
    let t = sim.ina_finish(id).expect("the job finishes");
    (seconds(t), stats, sim.ina_trees(id))
}

#[test]
fn single_switch_aggregation_takes_one_pass_of_the_data() {
    let topo = Topology::single_switch(8, LinkSpec::default()).unwrap();
    let bytes = 8 << 20;
    let (t, stats, trees) = run(
        &topo,
        InaJob::new((0..8).collect(), bytes),
        PacketConfig::default(),
    );
    assert_eq!(trees, 1);
    let packets = (bytes as f64 / 1460.0).ceil();
    let expect = packets * 1500.0 * 8.0 / 10e9;
    assert!(
        (t - expect).abs() / expect < 0.05,
        "simulated {t} s, one pass {expect} s"
    );
    assert_eq!(stats.ina.wrong_results, 0);
    assert_eq!(stats.ina.results, packets as u64 * 8);
}

#[test]
fn sums_are_exact_and_never_double_counted_under_loss() {
    let topo = Topology::fat_tree(4, LinkSpec::default()).unwrap();
    let cfg = PacketConfig {
        loss: 0.02,
        seed: 7,
        ..PacketConfig::default()
    };
    let (_, stats, trees) = run(&topo, InaJob::new((0..16).collect(), 1 << 20), cfg);
    assert_eq!(trees, 4, "k=4: four core roots");
    assert!(stats.drops > 100, "the loss happened: {stats:?}");
    assert!(stats.ina.worker_timeouts > 0);
    assert!(
        stats.ina.duplicates_ignored > 0,
        "repeats reached switches that had summed them"
    );
    assert_eq!(stats.ina.wrong_results, 0);
    assert_eq!(stats.ina.results, (1u64 << 20).div_ceil(1460) * 16);
}

#[test]
fn the_memory_share_caps_the_window_and_nothing_is_dropped_for_memory() {
    let topo = Topology::fat_tree(4, LinkSpec::default()).unwrap();
    let job = || InaJob::new((0..16).collect(), 2 << 20);
    let (fast, _, _) = run(&topo, job(), PacketConfig::default());
    // 8 slots per switch, split over 4 trees through the ToRs: cap 2.
    let small = PacketConfig {
        ina_memory: 8 * 3064,
        ..PacketConfig::default()
    };
    let (slow, stats, _) = run(&topo, job(), small);
    assert_eq!(
        stats.ina.no_memory, 0,
        "cwnd_cap kept every window within the memory"
    );
    assert_eq!(stats.ina.wrong_results, 0);
    // 4 trees x 2 packets per 13.2 us round trip (6 hops of 2.2 us)
    // carry 8 x 1.2 us of data: 73% of the line rate.
    let expect = fast / (8.0 * 1.2 / 13.2);
    assert!(
        (slow - expect).abs() / expect < 0.1,
        "window-bound: {slow} s, expected {expect} s"
    );
}

#[test]
fn partial_aggregation_never_double_counts_latecomers() {
    let topo = Topology::fat_tree(4, LinkSpec::default()).unwrap();
    let mut job = InaJob::new((0..16).collect(), 1 << 20);
    job.quorum = 0.5;
    let cfg = PacketConfig {
        loss: 0.01,
        seed: 2,
        ..PacketConfig::default()
    };
    let (_, stats, _) = run(&topo, job, cfg);
    assert_eq!(stats.ina.wrong_results, 0);
    assert_eq!(stats.ina.results, (1u64 << 20).div_ceil(1460) * 16);
}

#[test]
fn packets_are_spread_round_robin_over_the_trees() {
    // Workers in two pods: each core switch roots one tree.
    let topo = Topology::fat_tree(4, LinkSpec::default()).unwrap();
    let cores_used = |trees: usize| {
        let mut job = InaJob::new(vec![0, 2, 4, 6], 4 << 20);
        job.trees = trees;
        let mut sim = PacketSim::new(&topo, PacketConfig::default());
        sim.add_ina_job(job, 0).unwrap();
        sim.run();
        let bytes = sim.link_bytes();
        let core = |n: usize| topo.nodes[n] == shoal_sim::topology::Node::Switch { tier: 2 };
        let mut per_core = std::collections::BTreeMap::new();
        for (l, link) in topo.links.iter().enumerate() {
            if core(link.to) && bytes[l] > 0 {
                *per_core.entry(link.to).or_insert(0) += bytes[l];
            }
        }
        per_core.into_values().collect::<Vec<u64>>()
    };
    assert_eq!(cores_used(1).len(), 1);
    let four = cores_used(4);
    assert_eq!(four.len(), 4);
    let (lo, hi) = (four.iter().min().unwrap(), four.iter().max().unwrap());
    assert!(*hi - *lo <= 2 * 2 * 1500, "round robin: even load {four:?}");
}

#[test]
fn a_1024_worker_job_on_the_papers_fat_tree_sums_everyone_once() {
    let topo = Topology::fat_tree(16, LinkSpec::default()).unwrap();
    let (t, stats, trees) = run(
        &topo,
        InaJob::new((0..1024).collect(), 8 * 1460),
        PacketConfig::default(),
    );
    assert_eq!(trees, 4, "4 of the 64 core roots");
    assert_eq!(stats.ina.wrong_results, 0);
    assert_eq!(stats.ina.results, 8 * 1024);
    // 8 packets over 4 trees: 2 rounds up and down 6 hops, pipelined.
    assert!(t < 100e-6, "{t}");
}

/// Shares of the leaf0 -> spine link between 40 and 76 ms: (DCTCP flow,
/// aggregation), when the job starts 5 ms after the flow.
fn shares_against_a_flow(congestion_control: bool) -> (f64, f64) {
    use shoal_sim::units::PS_PER_MS;
    // Workers 0 and 2 on two leaves aggregate at the spine; the flow 1 -> 3
    // shares worker 0's uplink from leaf 0.
    let topo = Topology::leaf_spine(2, 1, 2, LinkSpec::default()).unwrap();
    let mut sim = PacketSim::new(&topo, PacketConfig::default());
    let flow = sim.add_flow(1, 3, 1000 << 20, 0);
    let mut job = InaJob::new(vec![0, 2], 1000 << 20);
    job.congestion_control = congestion_control;
    sim.add_ina_job(job, 5 * PS_PER_MS).unwrap();
    sim.run_until(40 * PS_PER_MS);
    let (f0, r0) = (sim.flow_delivered(flow), sim.stats().ina.results);
    sim.run_until(76 * PS_PER_MS);
    let (f1, r1) = (sim.flow_delivered(flow), sim.stats().ina.results);
    assert_eq!(sim.stats().ina.wrong_results, 0);
    let share = |bytes: f64| bytes * 8.0 / 36e-3 / 10e9;
    // Two workers each get a result per packet.
    (
        share((f1 - f0) as f64),
        share((r1 - r0) as f64 / 2.0 * 1460.0),
    )
}

#[test]
fn aggregation_shares_a_link_fairly_with_dctcp_and_starves_it_without_congestion_control() {
    // PANAMA's Fig. 10: (a) with its congestion control the two share the
    // bottleneck; (b) without it the flow starves.
    let (flow, agg) = shares_against_a_flow(true);
    assert!(
        (flow - agg).abs() < 0.15,
        "PANAMA: flow {flow:.3}, aggregation {agg:.3}"
    );
    assert!(flow + agg > 0.9);
    let (flow, agg) = shares_against_a_flow(false);
    assert!(
        flow < 0.05 && agg > 0.9,
        "no congestion control: flow {flow:.3}, aggregation {agg:.3}"
    );
}
