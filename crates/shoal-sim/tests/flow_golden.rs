//! The speed work on the DAG builder and the flow engine must not change a
//! single result: every registered algorithm, built from its real plans
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
/// (commit 8debd9e): (case, time_s, events, DAG fingerprint).
const BEFORE: &[(&str, f64, u64, u64)] = &[
    (
        "Allreduce/ring/13x1",
        0.004942703999999999,
        624,
        0x69965c0dccf91bef,
    ),
    (
        "Allreduce/ring/16x2",
        0.004948992000000001,
        960,
        0x17479244546099d5,
    ),
    (
        "Allreduce/recursive_doubling/13x1",
        0.026509649599999997,
        1236,
        0x178f301fd61c139d,
    ),
    (
        "Allreduce/recursive_doubling/16x2",
        0.028113166079999998,
        1980,
        0x412808cd29671b45,
    ),
    (
        "Allreduce/rabenseifner/13x1",
        0.012615129286110508,
        1542,
        0xf1fce036ac2f62fc,
    ),
    (
        "Allreduce/rabenseifner/16x2",
        0.014991252337665618,
        2943,
        0x149e802591e2caa1,
    ),
    (
        "Allreduce/binomial/13x1",
        0.023304921599999997,
        672,
        0x32d2ef7bf786131d,
    ),
    (
        "Allreduce/binomial/16x2",
        0.0233169216,
        720,
        0x2c76351d01e4b405,
    ),
    (
        "Allreduce/direct/13x1",
        0.041383238399999994,
        3864,
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
        0.0207172192,
        288,
        0xdadf0a359a678495,
    ),
    (
        "Broadcast/binomial/16x2",
        0.025891824,
        360,
        0x93201b4b29470b99,
    ),
    (
        "Broadcast/scatter_allgather/13x1",
        0.007083973051148601,
        579,
        0x7b80cef443c44290,
    ),
    (
        "Broadcast/scatter_allgather/16x2",
        0.00778652422521854,
        908,
        0xbf5119f826dd3abb,
    ),
    (
        "Broadcast/pipelined_chain/13x1",
        0.0311064288,
        288,
        0xc40fdb84e0e17631,
    ),
    (
        "Broadcast/pipelined_chain/16x2",
        0.020737619199999995,
        360,
        0x976f58f08743f999,
    ),
    (
        "Broadcast/topology_aware_pipelined_chain/13x1",
        0.0311064288,
        288,
        0xc40fdb84e0e17631,
    ),
    (
        "Broadcast/topology_aware_pipelined_chain/16x2",
        0.018144316799999994,
        360,
        0x231841ffab7d54c1,
    ),
    (
        "Reduce/binomial/13x1",
        0.010362409599999999,
        324,
        0x2012de4672488e81,
    ),
    (
        "Reduce/binomial/16x2",
        0.010365609599999999,
        408,
        0xc1e0888453cc9c35,
    ),
    ("Reduce/direct/13x1", 0.0310404288, 288, 0x7db1f948d124817d),
    ("Reduce/direct/16x2", 0.0362118336, 360, 0x4792a787c6d82641),
    (
        "Allgather/ring/13x1",
        0.031115228800000002,
        3744,
        0x96a2209f1b6865f9,
    ),
    ("Allgather/ring/16x2", 0.038837536, 5760, 0xb5600f730e9bf725),
    (
        "Allgather/recursive_doubling/13x1",
        0.07246980827779811,
        16098,
        0xa4aaa7b2866fdcad,
    ),
    (
        "Allgather/recursive_doubling/16x2",
        0.1344797763076644,
        14760,
        0x1d35fb5f51ff94e5,
    ),
    (
        "Allgather/bruck/13x1",
        0.04615142906720781,
        22584,
        0x93806e6d886ba075,
    ),
    (
        "Allgather/bruck/16x2",
        0.09602278503535065,
        32148,
        0xe9112bc72d77e605,
    ),
    (
        "ReduceScatter/ring/13x1",
        0.031115228800000002,
        3744,
        0x96a2209f1b6865f9,
    ),
    (
        "ReduceScatter/ring/16x2",
        0.038837536,
        5760,
        0xb5600f730e9bf725,
    ),
    (
        "ReduceScatter/halving/13x1",
        0.0982706912,
        5760,
        0x5803f2439ebeae59,
    ),
    (
        "ReduceScatter/halving/16x2",
        0.13446732479999998,
        8808,
        0x9035cde3f8a96225,
    ),
    (
        "Alltoall/pairwise/13x1",
        0.08038241115949275,
        7407,
        0x8c7ba968476f0ab5,
    ),
    (
        "Alltoall/pairwise/16x2",
        0.1057207513303285,
        16990,
        0x8c28faa54dcbf05,
    ),
    ("Gather/linear/13x1", 0.0310404288, 288, 0x7db1f948d124817d),
    ("Gather/linear/16x2", 0.0362118336, 360, 0x4792a787c6d82641),
    (
        "Gather/binomial/13x1",
        0.028669834933333336,
        1536,
        0xc9197ef6169a4bc5,
    ),
    (
        "Gather/binomial/16x2",
        0.03241167717942857,
        2580,
        0x5e6524c0628ee601,
    ),
    ("Scatter/linear/13x1", 0.0310404288, 288, 0x8b1f031fc0d6bcf5),
    ("Scatter/linear/16x2", 0.0362118336, 360, 0x607c93fba0d65e91),
    (
        "Scatter/binomial/13x1",
        0.043988540799999996,
        528,
        0x9d03bf724d8eefcd,
    ),
    (
        "Scatter/binomial/16x2",
        0.06726306239999999,
        768,
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
