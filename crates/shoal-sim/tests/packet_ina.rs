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
