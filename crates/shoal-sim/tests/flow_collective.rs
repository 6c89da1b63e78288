//! Flow engine on collectives: alpha-beta agreement on an uncongested
//! topology, and the 1024-rank speed bar.

use shoal_plan::Collective;
use shoal_sim::dag::{build, DagSpec};
use shoal_sim::flow::simulate;
use shoal_sim::topology::{LinkSpec, Topology};

#[test]
fn ring_allreduce_matches_alpha_beta_on_a_star() {
    // 8 hosts on one 10 Gb/s switch: ring allreduce of 8 MiB moves
    // 2(p-1)/p x 8 MiB per host, every hop uncongested (full duplex).
    let p = 8;
    let bytes: u64 = 8 << 20;
    let topo = Topology::parse("star:hosts=8", LinkSpec::default()).unwrap();
    let mut spec = DagSpec::new(Collective::Allreduce, "ring", p, bytes);
    spec.chunk_bytes = 1 << 30;
    let dag = build(&spec, None).unwrap();
    let run = simulate(&topo, &dag).unwrap();
    // alpha: 2 links x 1 us + 1 store-and-forward of 1500 B (1.2 us).
    let alpha = 2e-6 + 1.2e-6;
    // beta: a 1 MiB block is 719 packets of 1460 B payload + 40 B header.
    let block = bytes / p as u64;
    let wire = block + block.div_ceil(1460) * 40;
    let beta = wire as f64 * 8.0 / 10e9;
    let expected = 2.0 * (p - 1) as f64 * (alpha + beta);
    let err = (run.time_s - expected).abs() / expected;
    assert!(
        err < 0.01,
        "simulated {} s, alpha-beta {expected} s",
        run.time_s
    );
    // Conservation: each host uplink carries 2(p-1) blocks.
    let host0_up = topo.out_links(0)[0];
    assert_eq!(run.link_bytes[host0_up], (2 * (p as u64 - 1) * wire) as f64);
}

/// CPU time of this thread (Linux), so a loaded machine does not blur
/// the measurement; falls back to wall time elsewhere.
fn thread_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(stat.split_whitespace().next()?.parse::<f64>().ok()? / 1e9)
}

#[test]
fn ring_1024_ranks_on_k16_fat_tree_is_fast() {
    // The bar case of `shoal sim plan --engine flow` (2.1 M messages).
    let ranks = 1024;
    let topo = Topology::parse("fattree:k=16", LinkSpec::default()).unwrap();
    let spec = DagSpec::new(Collective::Allreduce, "ring", ranks, 64 << 20);
    let dag = build(&spec, None).unwrap();
    assert_eq!(dag.messages.len(), 2 * (ranks - 1) * ranks);
    let (start, cpu0) = (std::time::Instant::now(), thread_cpu_s());
    let run = simulate(&topo, &dag).unwrap();
    let wall = start.elapsed().as_secs_f64();
    let cpu = thread_cpu_s().zip(cpu0).map(|(b, a)| b - a).unwrap_or(wall);
    eprintln!(
        "{ranks}-rank ring 64 MiB: simulated {} s, {} events, wall {wall:.3} s, cpu {cpu:.3} s",
        run.time_s, run.events
    );
    // The bar is 1 s at 1024 ranks, which benchmarks measure (docs/sim.md);
    // this only catches a gross slowdown: on the shared 2-vCPU VM one run in
    // a few took 1.6-1.7 s of CPU (cold caches, a busy neighbour), against
    // 1.1-1.3 s otherwise.
    assert!(cpu < 3.0, "flow engine took {cpu} s of CPU");
    // The figures recorded in docs/sim.md: speed work must not move them
    // (at this size `DagProgress` is built on two threads; flow_golden
    // covers the small DAGs).
    assert_eq!(run.time_s, 0.11802996479999255);
    assert_eq!(run.events, 4190208);
    // Lower bound: 2(p-1)/p x 64 MiB at 10 Gb/s.
    let p = ranks as f64;
    let bound = 2.0 * (p - 1.0) / p * (64u64 << 20) as f64 * 8.0 / 10e9;
    assert!(
        run.time_s > bound && run.time_s < bound * 1.2,
        "{} vs {bound}",
        run.time_s
    );
}
