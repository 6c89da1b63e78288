//! Work on the DAG builder and the flow engine must not change a single
//! result unless the model is changed on purpose (then the table below is
//! recorded again): every registered algorithm, built from its real plans
//! and run on the flow engine, gives bit-for-bit the times (and event
//! counts, and a checksum of its message DAG) recorded before the change.

use shoal_plan::algorithms;
use shoal_sim::dag::{build, CollectiveDag, DagSpec};
use shoal_sim::flow::simulate;
use shoal_sim::topology::{LinkSpec, Topology};

/// An order-sensitive checksum of the messages and their dependencies.
fn fingerprint(dag: &CollectiveDag) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |x: u64| h = (h ^ x).wrapping_mul(0x100_0000_01b3);
    for m in &dag.messages {
        eat(m.id as u64);
        eat(m.src_rank as u64);
        eat(m.dst_rank as u64);
        eat(m.bytes);
        for &d in dag.deps(m.id) {
            eat((d as u64 + 1) << 20);
        }
    }
    h
}

fn run_all() -> Vec<(String, f64, u64, u64)> {
    let topo = Topology::parse("fattree:k=4", LinkSpec::default()).unwrap();
    let mut out = Vec::new();
    for algo in algorithms::registry() {
        if algo.reads_peers() {
            continue; // one host only, and added after the recording
        }
        for (world, rph) in [(13, 1), (16, 2)] {
            let mut spec = DagSpec::new(algo.collective, algo.name, world, 3 << 20);
            spec.ranks_per_host = rph;
            spec.chunk_bytes = 256 << 10;
            spec.root = world / 3;
            let dag = build(&spec, None).unwrap();
            let run = simulate(&topo, &dag).unwrap();
            let name = format!("{:?}/{}/{world}x{rph}", algo.collective, algo.name);
            out.push((name, run.time_s, run.events, fingerprint(&dag)));
        }
    }
    out
}

/// Recorded with the DAG builder and engine before the speed work
/// (commit 8debd9e), then once more when messages of a rank pair began to
/// go one after another (flow::collective, `RunningDag::sent`): (case,
/// time_s, events, DAG fingerprint). `SHOAL_SIM_RECORD=1 cargo test
/// --release -p shoal-sim --test flow_golden -- --nocapture` prints the
/// table again after a deliberate change of the model.
const BEFORE: &[(&str, f64, u64, u64)] = &[
    (
        "Allreduce/ring/13x1",
        0.004942703999999999,
        624,
        0x69965c0dccf91bef,
    ),
    ("Allreduce/ring/16x2", 0.004860192, 960, 0x17479244546099d5),
    (
        "Allreduce/recursive_doubling/13x1",
        0.009906788423101706,
        1638,
        0x178f301fd61c139d,
    ),
    (
        "Allreduce/recursive_doubling/16x2",
        0.016795330170136374,
        2274,
        0x412808cd29671b45,
    ),
    (
        "Allreduce/rabenseifner/13x1",
        0.009941806893410815,
        844,
        0xf1fce036ac2f62fc,
    ),
    (
        "Allreduce/rabenseifner/16x2",
        0.011128941550323233,
        1499,
        0x149e802591e2caa1,
    ),
    (
        "Allreduce/binomial/13x1",
        0.012327686400000004,
        615,
        0x32d2ef7bf786131d,
    ),
    (
        "Allreduce/binomial/16x2",
        0.009741984,
        740,
        0x2c76351d01e4b405,
    ),
    (
        "Allreduce/direct/13x1",
        0.04138323840000001,
        3744,
        0xf23e3ad88f40d7dd,
    ),
    (
        "Allreduce/direct/16x2",
        0.0853401792,
        5760,
        0x2bfda1873ad5b825,
    ),
    (
        "Allreduce/hierarchical/13x1",
        0.004942703999999999,
        624,
        0x69965c0dccf91bef,
    ),
    (
        "Allreduce/hierarchical/16x2",
        0.004618179200000001,
        832,
        0xbde7ddafa918f1bd,
    ),
    (
        "Broadcast/binomial/13x1",
        0.011236310400000003,
        299,
        0xdadf0a359a678495,
    ),
    (
        "Broadcast/binomial/16x2",
        0.011670460800000003,
        371,
        0x93201b4b29470b99,
    ),
    (
        "Broadcast/scatter_allgather/13x1",
        0.006046086399999996,
        386,
        0x7b80cef443c44290,
    ),
    (
        "Broadcast/scatter_allgather/16x2",
        0.005494504800000001,
        560,
        0xbf5119f826dd3abb,
    ),
    (
        "Broadcast/pipelined_chain/13x1",
        0.0050339296000000006,
        288,
        0xc40fdb84e0e17631,
    ),
    (
        "Broadcast/pipelined_chain/16x2",
        0.0041460288000000015,
        360,
        0x976f58f08743f999,
    ),
    (
        "Broadcast/topology_aware_pipelined_chain/13x1",
        0.0050339296000000006,
        288,
        0xc40fdb84e0e17631,
    ),
    (
        "Broadcast/topology_aware_pipelined_chain/16x2",
        0.003922953600000002,
        360,
        0x231841ffab7d54c1,
    ),
    (
        "Reduce/binomial/13x1",
        0.009588653333333334,
        305,
        0x2012de4672488e81,
    ),
    (
        "Reduce/binomial/16x2",
        0.0101399344,
        386,
        0xc1e0888453cc9c35,
    ),
    (
        "Reduce/direct/13x1",
        0.031040428800000006,
        288,
        0x7db1f948d124817d,
    ),
    (
        "Reduce/direct/16x2",
        0.03621183359999999,
        360,
        0x4792a787c6d82641,
    ),
    (
        "Allgather/ring/13x1",
        0.031040428799999943,
        3744,
        0x96a2209f1b6865f9,
    ),
    (
        "Allgather/ring/16x2",
        0.03879753600000002,
        5760,
        0xb5600f730e9bf725,
    ),
    (
        "Allgather/recursive_doubling/13x1",
        0.0698171647999998,
        3869,
        0xa4aaa7b2866fdcad,
    ),
    (
        "Allgather/recursive_doubling/16x2",
        0.12412571519999982,
        5770,
        0x1d35fb5f51ff94e5,
    ),
    (
        "Allgather/bruck/13x1",
        0.046554643200000044,
        3783,
        0x93806e6d886ba075,
    ),
    (
        "Allgather/bruck/16x2",
        0.10546556287999978,
        5818,
        0xe9112bc72d77e605,
    ),
    (
        "ReduceScatter/ring/13x1",
        0.031040428799999943,
        3744,
        0x96a2209f1b6865f9,
    ),
    (
        "ReduceScatter/ring/16x2",
        0.03879753600000002,
        5760,
        0xb5600f730e9bf725,
    ),
    (
        "ReduceScatter/halving/13x1",
        0.07416950919566148,
        4024,
        0x5803f2439ebeae59,
    ),
    (
        "ReduceScatter/halving/16x2",
        0.09906859327397961,
        6436,
        0x9035cde3f8a96225,
    ),
    (
        "Alltoall/pairwise/13x1",
        0.031051397600795772,
        29799,
        0x8c7ba968476f0ab5,
    ),
    (
        "Alltoall/pairwise/16x2",
        0.06286346825772035,
        59959,
        0x08c28faa54dcbf05,
    ),
    (
        "Gather/linear/13x1",
        0.031040428800000006,
        288,
        0x7db1f948d124817d,
    ),
    (
        "Gather/linear/16x2",
        0.03621183359999999,
        360,
        0x4792a787c6d82641,
    ),
    (
        "Gather/binomial/13x1",
        0.031040428800000023,
        528,
        0xc9197ef6169a4bc5,
    ),
    (
        "Gather/binomial/16x2",
        0.0387975360000001,
        768,
        0x5e6524c0628ee601,
    ),
    (
        "Scatter/linear/13x1",
        0.031040428800000006,
        288,
        0x8b1f031fc0d6bcf5,
    ),
    (
        "Scatter/linear/16x2",
        0.03621183359999999,
        360,
        0x607c93fba0d65e91,
    ),
    (
        "Scatter/binomial/13x1",
        0.03148337920000003,
        530,
        0x9d03bf724d8eefcd,
    ),
    (
        "Scatter/binomial/16x2",
        0.03969423680000013,
        771,
        0x36e4ebb0ce0f1451,
    ),
    (
        "Barrier/dissemination/13x1",
        4.8e-5,
        104,
        0xb6d40d322ce9f7e3,
    ),
    (
        "Barrier/dissemination/16x2",
        3.48e-5,
        128,
        0xe8b3a5437e9738c5,
    ),
];

#[test]
fn results_are_unchanged_by_the_speed_work() {
    let got = run_all();
    if std::env::var_os("SHOAL_SIM_RECORD").is_some() {
        // Re-recording after a deliberate change of the model: prints the table.
        for (name, time, events, dag) in &got {
            println!("    (\n        \"{name}\",\n        {time:?},\n        {events},\n        {dag:#018x},\n    ),");
        }
        return;
    }
    // Algorithms registered later are not in the record; every recorded
    // one must still be there and give the same answers.
    for want in BEFORE {
        let g = got
            .iter()
            .find(|g| g.0 == want.0)
            .unwrap_or_else(|| panic!("{} is no longer built", want.0));
        assert_eq!(
            g.1.to_bits(),
            want.1.to_bits(),
            "{}: time {} s, was {} s",
            g.0,
            g.1,
            want.1
        );
        assert_eq!(g.2, want.2, "{}: events", g.0);
        assert_eq!(g.3, want.3, "{}: message DAG", g.0);
    }
}
