//! The multi-threaded data plane: jobs spread over threads, each thread the
//! only one to touch its jobs' slots, exact sums whatever the thread count.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Barrier};
use std::thread;

use common::*;
use shoal_ina::switch::{DropReason, SwitchConfig, SwitchHandle};
use shoal_ina::{InaClient, InaDType, InaOp, LeafSpec, TreeSpec};

/// Job `job`'s contribution from `rank`: exact small integers, different in
/// every job, so a packet summed into another job's slot shows.
fn job_value(job: usize, rank: usize, i: usize) -> f32 {
    ((job * 1009 + rank * 131 + i * 7) % 2048) as f32 - 1024.0
}

/// `calls` f32 sums of `elems` values on every rank of job `job`.
fn exact_sums(c: &mut InaClient, job: usize, rank: usize, ranks: usize, elems: usize) {
    for call in 0..3 {
        let v: Vec<f32> = (0..elems).map(|i| job_value(job, rank, i + call)).collect();
        let mut buf = f32_bytes(&v);
        c.allreduce(&mut buf, InaDType::F32, InaOp::Sum).unwrap();
        for (i, got) in f32s(&buf).into_iter().enumerate() {
            let want: f32 = (0..ranks).map(|r| job_value(job, r, i + call)).sum();
            assert_eq!(got, want, "job {job} rank {rank} call {call} element {i}");
        }
    }
}

/// `jobs` jobs of `ranks` thread workers at once on `sw`; all are admitted
/// before any sends, so they are spread over the switch's threads.
fn concurrent_jobs(sw: &SwitchHandle, jobs: usize, ranks: usize, elems: usize) {
    let all_admitted = Arc::new(Barrier::new(jobs * ranks));
    let handles: Vec<_> = (0..jobs)
        .map(|job| {
            let (trees, barrier) = (flat(sw), all_admitted.clone());
            thread::spawn(move || {
                run_ranks(
                    ranks,
                    trees,
                    |_| {},
                    move |rank, c| {
                        barrier.wait();
                        exact_sums(c, job, rank, ranks, elems);
                    },
                )
            })
        })
        .collect();
    for h in handles {
        h.join().expect("job");
    }
}

fn switch_of(threads: usize) -> SwitchHandle {
    switch_with(|c| {
        c.threads = threads;
        c.memory = 32 << 20;
        c.metrics = Some("127.0.0.1:0".parse().unwrap());
    })
}

/// Many jobs at once, on 1, 2 and 4 threads: every sum is exact (two threads
/// on one slot would lose or mix contributions), and every thread served
/// jobs, counted in its own metrics.
#[test]
fn many_concurrent_jobs_are_exact_on_1_2_4_threads() {
    for threads in [1, 2, 4] {
        let sw = switch_of(threads);
        assert_eq!(sw.data_addrs.len(), threads);
        concurrent_jobs(&sw, 8, 3, 20_000);
        let m = &sw.metrics;
        // A member's FIN may be read after its job was released (the
        // release comes over TCP, ahead of the queued datagrams): unknown_job.
        let drops: Vec<_> = DropReason::ALL
            .iter()
            .map(|&r| (r, m.drops(r)))
            .filter(|&(r, n)| n > 0 && r != DropReason::UnknownJob)
            .collect();
        assert!(drops.is_empty(), "{drops:?}");
        assert_eq!(m.jobs_admitted.load(Relaxed), 8);
        let per_thread: Vec<u64> = m
            .shards()
            .iter()
            .map(|s| s.rx_packets.load(Relaxed))
            .collect();
        assert!(
            per_thread.iter().all(|&p| p > 0),
            "{threads} threads: every thread received packets: {per_thread:?}"
        );
        assert_eq!(per_thread.iter().sum::<u64>(), m.total(|s| &s.rx_packets));
    }
}

/// The Prometheus page shows each thread's packets, bytes, drops and jobs.
#[test]
fn metrics_show_every_thread() {
    let sw = switch_of(2);
    let trees = flat(&sw);
    let store = MemStore::default();
    // A lone job holds thread 0, so the next one is placed on thread 1.
    let lone = InaClient::join(&config(0, 1, trees.clone()), &store).unwrap();
    concurrent_jobs(&sw, 1, 2, 5_000);
    let text = scrape(&sw);
    for line in [
        "shoal_switch_threads 2",
        "shoal_switch_thread_jobs{thread=\"0\"} 1",
        "shoal_switch_thread_jobs{thread=\"1\"} 0",
        "shoal_switch_thread_drops_total{thread=\"1\"} 0",
        "shoal_switch_thread_rx_packets_total{thread=\"0\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    let rx1 = sw.metrics.shard(1).rx_bytes.load(Relaxed);
    assert!(rx1 > 2 * 5_000 * 4, "thread 1 got the job's bytes: {rx1}");
    let line = format!("shoal_switch_thread_rx_bytes_total{{thread=\"1\"}} {rx1}");
    assert!(text.contains(&line), "{line} missing in\n{text}");
    lone.close(&store).unwrap();
}

fn scrape(sw: &SwitchHandle) -> String {
    let mut http = TcpStream::connect(sw.metrics_addr.unwrap()).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    http.read_to_string(&mut text).unwrap();
    text
}

/// A leaf's partial sums reach its job on the parent's second thread: the
/// uplink names that thread's port.
#[test]
fn leaves_reach_a_job_on_any_thread_of_the_root() {
    let root = switch_of(2);
    let store = MemStore::default();
    let lone = InaClient::join(&config(0, 1, flat(&root)), &store).unwrap();
    let leaf = || {
        let parent = root.data_addr;
        switch_with(move |c: &mut SwitchConfig| {
            c.parent = Some(parent);
            c.threads = 2;
        })
    };
    let (l1, l2) = (leaf(), leaf());
    let tree = TreeSpec {
        root: root.control_addr,
        leaves: vec![
            LeafSpec {
                control: l1.control_addr,
                ranks: vec![0, 1],
            },
            LeafSpec {
                control: l2.control_addr,
                ranks: vec![2, 3],
            },
        ],
    };
    run_ranks(
        4,
        vec![tree],
        |_| {},
        |rank, c| exact_sums(c, 0, rank, 4, 50_000),
    );
    let on_second = root.metrics.shard(1).aggregations.load(Relaxed);
    assert!(
        on_second > 100,
        "the tree's root job ran on thread 1: {on_second}"
    );
    assert_eq!(root.metrics.total_drops() + l1.metrics.total_drops(), 0);
    lone.close(&store).unwrap();
}

/// `--max-jobs` bounds the jobs of all threads together; a released job's
/// place is free again (on whichever thread held it).
#[test]
fn the_job_limit_counts_every_thread() {
    let sw = switch_with(|c| {
        c.threads = 2;
        c.max_jobs = 2;
    });
    let store = MemStore::default();
    let join = |store: &MemStore| InaClient::join(&config(0, 1, flat(&sw)), store);
    let (a, b) = (join(&store).unwrap(), join(&MemStore::default()).unwrap());
    match join(&MemStore::default()) {
        Err(shoal_ina::InaError::Full(reason)) => assert!(reason.contains("2 jobs"), "{reason}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a third job was admitted"),
    }
    let per_thread: Vec<u64> = sw
        .metrics
        .shards()
        .iter()
        .map(|s| s.jobs.load(Relaxed))
        .collect();
    assert_eq!(per_thread, [1, 1], "one job per thread");
    a.close(&store).unwrap();
    let c = join(&MemStore::default()).unwrap();
    assert_eq!(
        sw.metrics.shard(0).jobs.load(Relaxed),
        1,
        "the freed place is used"
    );
    drop((b, c));
}
