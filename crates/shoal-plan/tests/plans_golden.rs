//! Work on the plan builder's speed must not change a single plan: every
//! registered algorithm's plans (every step, its operation and its
//! dependencies, and the scratch asked for) are checksummed at a few call
//! shapes and compared with the checksums recorded before the change.

use shoal_plan::algorithms;
use shoal_plan::{CallShape, Plan};

/// An order-sensitive checksum (FNV-1a) of the plans of every rank.
fn fingerprint(plans: &[Plan]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    };
    for plan in plans {
        eat(format!("rank {} scratch {}", plan.rank, plan.scratch_len).as_bytes());
        for step in &plan.steps {
            eat(format!("{:?} after {:?};", step.op, step.deps).as_bytes());
        }
    }
    h
}

/// (case, checksum) of every registered algorithm at 13 ranks (one per
/// host), 16 ranks (two per host), 64 ranks (four per host) and, for the shared-memory algorithms,
/// 8 ranks on one host; counts that neither the world nor the pieces
/// divide, so that blocks and pieces are uneven.
fn run_all() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for algo in algorithms::registry() {
        let layouts: &[(usize, usize)] = if algo.reads_peers() {
            &[(8, 8)]
        } else {
            &[(13, 1), (16, 2), (64, 4)]
        };
        for &(world, ranks_per_host) in layouts {
            let shape = CallShape {
                root: world / 3,
                ranks_per_host,
                ..CallShape::new(algo.collective, world, 1000 + world, 97)
            };
            if let Some(why) = algo.refuses(&shape) {
                panic!("{} refuses {shape:?}: {why}", algo.name);
            }
            let plans: Vec<Plan> = (0..world).map(|r| (algo.generate)(&shape, r)).collect();
            let name = format!(
                "{:?}/{}/{world}x{ranks_per_host}",
                algo.collective, algo.name
            );
            out.push((name, fingerprint(&plans)));
        }
    }
    out
}

/// Recorded with the builder of commit 36fbfd9 (hazard segments in a
/// `BTreeMap`, a `Vec` per access list). `SHOAL_PLAN_RECORD=1 cargo test
/// --release -p shoal-plan --test plans_golden -- --nocapture` prints the
/// table again after a deliberate change of an algorithm.
const BEFORE: &[(&str, u64)] = &[
    ("Allreduce/ring/13x1", 0xc551bbdb98d61225),
    ("Allreduce/ring/16x2", 0xc1bca224eea51631),
    ("Allreduce/ring/64x4", 0xa575ca10dd6c5561),
    ("Allreduce/recursive_doubling/13x1", 0xdda3f862e3ba9954),
    ("Allreduce/recursive_doubling/16x2", 0xba597d49f9f1fefd),
    ("Allreduce/recursive_doubling/64x4", 0x62711e8dfffb2f03),
    ("Allreduce/rabenseifner/13x1", 0x8c91b3f24ceb4897),
    ("Allreduce/rabenseifner/16x2", 0xb1c3f5b52c9243fd),
    ("Allreduce/rabenseifner/64x4", 0x6f9fa08693b7c34b),
    ("Allreduce/binomial/13x1", 0x9b054041f2899454),
    ("Allreduce/binomial/16x2", 0x7d9be991f79db5a4),
    ("Allreduce/binomial/64x4", 0xfd27dfd4a6a09056),
    ("Allreduce/direct/13x1", 0x1bcbbd472570f8be),
    ("Allreduce/direct/16x2", 0x57bb57a81106b173),
    ("Allreduce/direct/64x4", 0xe0fbb24dd02fcdbd),
    ("Allreduce/hierarchical/13x1", 0x8f679247d24916d5),
    ("Allreduce/hierarchical/16x2", 0xb7588bf242d628e3),
    ("Allreduce/hierarchical/64x4", 0xdd0878a42744add7),
    ("Broadcast/binomial/13x1", 0x2fe3506ab58a0fe0),
    ("Broadcast/binomial/16x2", 0xb39ba5199ec3f1ef),
    ("Broadcast/binomial/64x4", 0x2bff25964a9a48f7),
    ("Broadcast/scatter_allgather/13x1", 0xee22b0c1ab06a6b3),
    ("Broadcast/scatter_allgather/16x2", 0x37d052bc276aadab),
    ("Broadcast/scatter_allgather/64x4", 0x17eddfd5a9cbe225),
    ("Broadcast/pipelined_chain/13x1", 0xa8cacd269c8246d3),
    ("Broadcast/pipelined_chain/16x2", 0xe09e6f857f43ecb7),
    ("Broadcast/pipelined_chain/64x4", 0x17254434ee53cdfb),
    (
        "Broadcast/topology_aware_pipelined_chain/13x1",
        0xa8cacd269c8246d3,
    ),
    (
        "Broadcast/topology_aware_pipelined_chain/16x2",
        0x6e57f7fd06080c70,
    ),
    (
        "Broadcast/topology_aware_pipelined_chain/64x4",
        0x19af9fdfc8a6222d,
    ),
    ("Reduce/binomial/13x1", 0x8344a6e72ea96faa),
    ("Reduce/binomial/16x2", 0x04e45766ad804386),
    ("Reduce/binomial/64x4", 0xf6c1218dc6a04b3b),
    ("Reduce/direct/13x1", 0x868242515183b5be),
    ("Reduce/direct/16x2", 0x1821462df246e6df),
    ("Reduce/direct/64x4", 0xd6f72616f247e7fc),
    ("Allgather/ring/13x1", 0x57dca2cc7d91261d),
    ("Allgather/ring/16x2", 0xbd56e14ba334ef83),
    ("Allgather/ring/64x4", 0xde220ad23ebd8a2c),
    ("Allgather/recursive_doubling/13x1", 0x24465be4b6242764),
    ("Allgather/recursive_doubling/16x2", 0xe3428cb9bbf4e269),
    ("Allgather/recursive_doubling/64x4", 0xfcc9b9378c22a85a),
    ("Allgather/bruck/13x1", 0x67add071582990c9),
    ("Allgather/bruck/16x2", 0x625ff9e4b707cda2),
    ("Allgather/bruck/64x4", 0x5c3776309107ad1e),
    ("ReduceScatter/ring/13x1", 0x1651b3eca4f59373),
    ("ReduceScatter/ring/16x2", 0x43c934a61816306d),
    ("ReduceScatter/ring/64x4", 0xa66964ee3130650b),
    ("ReduceScatter/halving/13x1", 0xdfc860b336cf1181),
    ("ReduceScatter/halving/16x2", 0xbebaffecbde635c1),
    ("ReduceScatter/halving/64x4", 0x2578cf75d31100be),
    ("Alltoall/pairwise/13x1", 0x60869f63b5cddf32),
    ("Alltoall/pairwise/16x2", 0xc0997f0606a9f5e3),
    ("Alltoall/pairwise/64x4", 0x133c61d49070cea1),
    ("Gather/linear/13x1", 0x82538a700db0c9ff),
    ("Gather/linear/16x2", 0xc2cbbc31ac70d705),
    ("Gather/linear/64x4", 0x7eb80938ef9486fe),
    ("Gather/binomial/13x1", 0xf42408f471cacaae),
    ("Gather/binomial/16x2", 0x4c80d2de97e5ef7e),
    ("Gather/binomial/64x4", 0x58a6496e785f7030),
    ("Scatter/linear/13x1", 0x606fb980418a4fd3),
    ("Scatter/linear/16x2", 0x850bdd6c4490d6dd),
    ("Scatter/linear/64x4", 0x170cfe850ddb0b08),
    ("Scatter/binomial/13x1", 0xf8b9209a8c6d6f28),
    ("Scatter/binomial/16x2", 0x3798bcd09ad6c7de),
    ("Scatter/binomial/64x4", 0x6e8ff34f369b5a40),
    ("Barrier/dissemination/13x1", 0x3e3f3ad67d412cde),
    ("Barrier/dissemination/16x2", 0x5c99b885c3211a83),
    ("Barrier/dissemination/64x4", 0xa46e01a0cd05bde5),
    ("Allreduce/shm_flat/8x8", 0xfb943210f34b0b68),
    ("Allreduce/shm_sharded/8x8", 0x05e3679d25fa8d8d),
    ("Broadcast/shm_read/8x8", 0x212b541a80b37989),
    ("Allgather/shm_read/8x8", 0xa948363c43edd275),
    ("ReduceScatter/shm_read/8x8", 0x4bc399e4481b5aca),
    ("Reduce/shm_read/8x8", 0x1d8e923a5946753c),
    ("Gather/shm_read/8x8", 0x8d50b830e29c1a2f),
    ("Scatter/shm_read/8x8", 0x873dd1406dfc134d),
    ("Alltoall/shm_read/8x8", 0xaee00eaa8602f225),
];

#[test]
fn every_algorithm_plans_exactly_as_recorded() {
    let now = run_all();
    if std::env::var_os("SHOAL_PLAN_RECORD").is_some() {
        for (name, sum) in &now {
            println!("    (\"{name}\", {sum:#018x}),");
        }
    }
    let before: Vec<(String, u64)> = BEFORE.iter().map(|&(n, s)| (n.to_string(), s)).collect();
    assert_eq!(now, before);
}
