//! Every registered algorithm, verified over world sizes 1..=16, awkward
//! counts, several roots and chunk sizes.

use shoal_plan::algorithms::for_collective;
use shoal_plan::verify::verify;
use shoal_plan::{find, registry, CallShape, Collective, CostParams};

const COUNTS: [usize; 8] = [0, 1, 2, 3, 7, 13, 64, 97];

fn chunks(count: usize) -> &'static [usize] {
    // Chunk 1 multiplies the steps by the count: only for small counts.
    if count <= 13 {
        &[1, 3, 1 << 20]
    } else {
        &[3, 1 << 20]
    }
}

fn roots(collective: Collective, world: usize) -> Vec<usize> {
    let mut roots = if collective.rooted() {
        vec![0, world / 2, world - 1]
    } else {
        vec![0]
    };
    roots.dedup();
    roots
}

fn verify_collective(collective: Collective) {
    let mut checked = 0;
    for alg in for_collective(collective) {
        for world in 1..=16 {
            for count in COUNTS {
                for &chunk in chunks(count) {
                    // Block layouts of 1, 2 and 3 ranks per host (topology-aware algorithms).
                    // ... and all ranks on one host (shared-memory algorithms).
                    let mut locals = vec![1, 2, 3, world];
                    locals.dedup();
                    for local in locals.into_iter().filter(|l| world % l == 0) {
                        for root in roots(collective, world) {
                            let shape = CallShape {
                                collective,
                                world,
                                count,
                                root,
                                chunk,
                                ranks_per_host: local,
                                counts: None,
                            };
                            if !alg.handles(&shape) {
                                continue;
                            }
                            if let Err(e) = verify(alg, &shape) {
                                panic!("{collective}:{} {shape:?}: {e}", alg.name);
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 0, "no algorithm for {collective}");
}

#[test]
fn allreduce() {
    verify_collective(Collective::Allreduce);
}

#[test]
fn broadcast() {
    verify_collective(Collective::Broadcast);
}

#[test]
fn reduce() {
    verify_collective(Collective::Reduce);
}

#[test]
fn allgather() {
    verify_collective(Collective::Allgather);
}

#[test]
fn reduce_scatter() {
    verify_collective(Collective::ReduceScatter);
}

#[test]
fn alltoall() {
    verify_collective(Collective::Alltoall);
}

#[test]
fn gather() {
    verify_collective(Collective::Gather);
}

#[test]
fn scatter() {
    verify_collective(Collective::Scatter);
}

#[test]
fn barrier() {
    verify_collective(Collective::Barrier);
}

#[test]
fn names_are_unique_per_collective() {
    for c in Collective::ALL {
        let mut names: Vec<_> = for_collective(c).map(|a| a.name).collect();
        let all = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all, "{c}");
    }
    assert!(registry().len() >= 20);
}

#[test]
fn unknown_name_lists_valid_ones() {
    let err = find(Collective::Allreduce, "nope")
        .err()
        .expect("unknown name must fail")
        .to_string();
    for name in [
        "ring",
        "recursive_doubling",
        "rabenseifner",
        "binomial",
        "direct",
    ] {
        assert!(err.contains(name), "{err}");
    }
    assert!(err.contains("nope"));
    assert_eq!(
        find(Collective::Broadcast, "pipelined_chain").unwrap().name,
        "pipelined_chain"
    );
}

/// The selector relies on the relative order of the estimates.
#[test]
fn cost_model_orders_the_classics() {
    let params = CostParams {
        alpha: 5e-6,
        beta: 1e-10,
        gamma: 2e-11,
        alpha_local: 1e-6,
        beta_local: 5e-11,
        beta_read: 5e-11,
    };
    let shape = |collective, count| CallShape {
        collective,
        world: 16,
        count,
        root: 0,
        chunk: 1 << 16,
        ranks_per_host: 1,
        counts: None,
    };
    let cost = |c, name, count| (find(c, name).unwrap().cost)(&shape(c, count), 4, &params);
    let ar = Collective::Allreduce;
    let small = 8;
    let big = 64 << 20;
    assert!(cost(ar, "recursive_doubling", small) < cost(ar, "ring", small));
    assert!(cost(ar, "direct", small) < cost(ar, "ring", small));
    assert!(cost(ar, "ring", big) < cost(ar, "recursive_doubling", big));
    assert!(cost(ar, "rabenseifner", big) < cost(ar, "recursive_doubling", big));
    assert!(cost(ar, "ring", big) < cost(ar, "direct", big));
    let bc = Collective::Broadcast;
    assert!(cost(bc, "pipelined_chain", big) < cost(bc, "binomial", big));
    assert!(cost(bc, "binomial", small) < cost(bc, "pipelined_chain", small));
    for alg in registry() {
        let c = (alg.cost)(&shape(alg.collective, 1000), 4, &params);
        assert!(
            c.is_finite() && c >= 0.0,
            "{}:{} cost {c}",
            alg.collective,
            alg.name
        );
    }
}

/// Chunked transfers pipeline: in the ring, piece k of a round waits only
/// for piece k of the previous round, not for the whole block.
#[test]
fn ring_pieces_wait_only_for_their_own_piece() {
    use shoal_plan::Op;
    let shape = CallShape {
        collective: Collective::Allreduce,
        world: 4,
        count: 4 * 30,
        root: 0,
        chunk: 10,
        ranks_per_host: 1,
        counts: None,
    };
    let plan = (find(Collective::Allreduce, "ring").unwrap().generate)(&shape, 1);
    let sends: Vec<_> = plan
        .steps
        .iter()
        .filter(|s| matches!(s.op, Op::Send { .. }))
        .collect();
    assert_eq!(sends.len(), 2 * 3 * 3, "2 phases x 3 rounds x 3 pieces");
    for step in &sends {
        let Op::Send { src, .. } = step.op else {
            unreachable!()
        };
        assert_eq!(step.deps.len(), 1, "{step:?}");
        let dep = &plan.steps[step.deps[0]].op;
        let written = match *dep {
            Op::RecvReduce { dst, .. } | Op::Recv { dst, .. } | Op::Copy { dst, .. } => dst,
            _ => panic!("unexpected dependency {dep:?}"),
        };
        assert_eq!(written, src, "a send waits for exactly the piece it sends");
    }
}

/// Per-rank counts for `len` blocks: a deterministic mix of zeros, ones and
/// awkward sizes, different for each seed.
fn varied_counts(len: usize, seed: usize) -> Vec<usize> {
    const SIZES: [usize; 7] = [0, 1, 5, 0, 13, 2, 31];
    (0..len)
        .map(|i| SIZES[(i * 3 + seed) % SIZES.len()])
        .collect()
}

/// Every algorithm that takes per-rank counts, verified over world sizes
/// 1..=9 with uneven and zero blocks; the others are not offered such calls.
#[test]
fn variable_counts() {
    let mut checked = 0;
    for alg in registry().iter().filter(|a| a.needs.counts) {
        let (collective, name) = (alg.collective, alg.name);
        for world in 1..=9 {
            for seed in 0..4 {
                for chunk in [1, 4, 1 << 20] {
                    let mut shape = CallShape {
                        collective,
                        world,
                        count: 0,
                        root: 0,
                        chunk,
                        ranks_per_host: 1,
                        counts: None,
                    };
                    let len = shape.counts_len().unwrap();
                    shape.counts = Some(varied_counts(len, seed).into());
                    if let Err(e) = verify(alg, &shape) {
                        panic!("{collective}:{name} {shape:?}: {e}");
                    }
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 3 * 9 * 4 * 3);
    let shape = CallShape {
        collective: Collective::Allgather,
        world: 3,
        count: 0,
        root: 0,
        chunk: 4,
        ranks_per_host: 1,
        counts: Some(vec![1, 2, 3].into()),
    };
    assert!(find(Collective::Allgather, "ring").unwrap().handles(&shape));
    assert!(!find(Collective::Allgather, "bruck")
        .unwrap()
        .handles(&shape));
}

/// What an algorithm needs is a field of its registry entry, and it is
/// true: the shared-memory ones (named `shm_` by convention) and only they
/// read peers' memory, and an algorithm that does not follow the host
/// layout makes the same plans whatever the layout.
#[test]
fn needs_say_what_the_plans_do() {
    for alg in registry() {
        assert_eq!(
            alg.needs.peers_memory,
            alg.name.starts_with("shm_"),
            "{}:{}",
            alg.collective,
            alg.name
        );
        if alg.needs.host_layout || alg.needs.peers_memory {
            continue;
        }
        let shape = |ranks_per_host| CallShape {
            collective: alg.collective,
            world: 4,
            count: 37,
            root: 1,
            chunk: 8,
            ranks_per_host,
            counts: None,
        };
        for rank in 0..4 {
            let flat = (alg.generate)(&shape(1), rank);
            for per_host in [2, 4] {
                assert_eq!(
                    (alg.generate)(&shape(per_host), rank),
                    flat,
                    "{}:{} rank {rank} at {per_host} ranks per host",
                    alg.collective,
                    alg.name
                );
            }
        }
    }
    let layout: Vec<&str> = registry()
        .iter()
        .filter(|a| a.needs.host_layout)
        .map(|a| a.name)
        .collect();
    assert_eq!(layout, ["hierarchical", "topology_aware_pipelined_chain"]);
}
