//! Loopback measurements of the software switch and the INA allreduce, with
//! thread workers in one process (so workers and switch share the host's
//! cores). Run: `cargo run --release -p shoal-ina --example ina_bench [quick|core|threads]`
//! (`INA_BENCH_PAYLOAD=32768` for another payload budget).

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{flat, run_ranks, switch_with};
use shoal_ina::control::{AdmitReq, CtrlMsg};
use shoal_ina::mac::PacketKey;
use shoal_ina::proto::{
    max_count, slot_of, Header, Kind, WireOp, WireType, HEADER_LEN, TAGGED_LEN,
};
use shoal_ina::switch::core::{Sink, SwitchCore};
use shoal_ina::switch::{Metrics, SwitchConfig};
use shoal_ina::{InaDType, InaOp};

/// UDP payload budget of switch and workers: `INA_BENCH_PAYLOAD` (bytes),
/// default 1472.
fn payload() -> usize {
    std::env::var("INA_BENCH_PAYLOAD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(shoal_ina::proto::DEFAULT_PAYLOAD_BUDGET)
}

/// Median seconds of `reps` allreduces of `bytes` per worker (after a warm-up).
fn time_allreduce(n: usize, bytes: usize, reps: usize, drop_rate: f64) -> f64 {
    time_on_threads(n, bytes, reps, drop_rate, 1, 1)
}

/// Like `time_allreduce`, on a switch of `threads` data-plane threads that
/// the job uses as `trees` trees (one switch job each, spread over threads).
fn time_on_threads(
    n: usize,
    bytes: usize,
    reps: usize,
    drop_rate: f64,
    threads: usize,
    trees: usize,
) -> f64 {
    let sw = switch_with(|c| {
        c.memory = 64 << 20;
        c.drop_rate = drop_rate;
        c.payload_budget = payload();
        c.threads = threads;
    });
    let trees: Vec<_> = (0..trees).flat_map(|_| flat(&sw)).collect();
    let barrier = Arc::new(Barrier::new(n));
    let times = run_ranks(
        n,
        trees,
        |c| {
            c.dead_timeout = Duration::from_secs(60);
            c.payload_budget = payload();
        },
        move |_, c| {
            let mut buf = vec![0u8; bytes];
            for (i, b) in buf.iter_mut().enumerate() {
                *b = if i % 4 == 3 { 0x3f } else { 0 };
            }
            let mut t = Vec::new();
            for _ in 0..reps + 1 {
                barrier.wait();
                let s = Instant::now();
                c.allreduce(&mut buf, InaDType::F32, InaOp::Sum).unwrap();
                t.push(s.elapsed().as_secs_f64());
            }
            t.remove(0);
            t.sort_by(|a, b| a.partial_cmp(b).unwrap());
            t[t.len() / 2]
        },
    );
    if std::env::var("INA_BENCH_VERBOSE").is_ok() {
        let m = &sw.metrics;
        eprintln!(
            "  [n={n} bytes={bytes}] rx {} aggs {} retx {} resent {} dup {} ecn {} drops {}",
            m.total(|c| &c.rx_packets),
            m.total(|c| &c.aggregations),
            m.total(|c| &c.retransmissions),
            m.total(|c| &c.results_resent),
            m.total(|c| &c.duplicates),
            m.total(|c| &c.ecn_marks),
            m.total_drops()
        );
    }
    times.into_iter().fold(0.0, f64::max)
}

const KEY: PacketKey = PacketKey::from_bytes(*b"benchkey");

struct NullSink(usize);

impl Sink for NullSink {
    fn send(&mut self, pkt: &[u8], _: SocketAddr) {
        self.0 += pkt.len();
    }
}

/// The switch's packet processing alone (no sockets): input GB/s of one core.
fn core_throughput(n: u16, bytes: usize) -> f64 {
    let cfg = SwitchConfig {
        memory: 64 << 20,
        ..SwitchConfig::loopback(common::switch_secret())
    };
    let mut core = SwitchCore::new(&cfg, 9800, Arc::new(Metrics::default()));
    let req = AdmitReq {
        tree: 0,
        members: n,
        slots: 256,
        wire_mask: 1,
        partial_min: 0,
        deadline_us: 0,
        key: KEY,
        uplink: None,
    };
    let CtrlMsg::AdmitOk(ok) = core.control(CtrlMsg::Admit(req), 1) else {
        panic!("admit")
    };
    let per = max_count(1472, WireType::F32);
    let packets = bytes / (per * 4);
    // Packets are encoded (and tagged, as the workers would) ahead of the
    // timed part, a round of sequence numbers at a time: only the switch's
    // work is measured.
    const ROUND: u32 = 128;
    let len = HEADER_LEN + per * 4;
    let mut round = vec![0u8; len * ROUND as usize * n as usize];
    let mut sink = NullSink(0);
    let from: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut busy = Duration::ZERO;
    for first in (0..packets as u32).step_by(ROUND as usize) {
        let seqs = first..(first + ROUND).min(packets as u32);
        let mut pkts = round.chunks_exact_mut(len);
        for seq in seqs.clone() {
            for m in 0..n {
                let pkt = pkts.next().expect("a round holds ROUND seqs");
                let (slot, shadow) = slot_of(seq, ok.slots);
                let h = Header {
                    kind: Kind::Data,
                    flags: 0,
                    wire: WireType::F32,
                    op: WireOp::Sum,
                    exponent: 0,
                    job: ok.job,
                    tree: 0,
                    member: m,
                    seq,
                    slot,
                    shadow,
                    count: per as u16,
                    contributors: 1,
                    cwnd_cap: u16::MAX,
                };
                h.encode(pkt, &KEY);
            }
        }
        let used = seqs.len() * n as usize;
        let start = Instant::now();
        for pkt in round.chunks_exact(len).take(used) {
            core.on_datagram(pkt, from, start, &mut sink);
        }
        busy += start.elapsed();
    }
    (packets * per * 4 * n as usize) as f64 / busy.as_secs_f64() / 1e9
}

/// Nanoseconds of one HalfSipHash-2-4-64 tag over `len` bytes.
fn tag_ns(len: usize) -> f64 {
    let data = vec![0x5Au8; len];
    let reps = 2_000_000 / len.div_ceil(28);
    let start = Instant::now();
    let mut acc = 0u64;
    for i in 0..reps {
        acc ^= KEY.tag(std::hint::black_box(&data)).wrapping_add(i as u64);
    }
    std::hint::black_box(acc);
    start.elapsed().as_secs_f64() * 1e9 / reps as f64
}

/// `threads`: switch throughput with 1 and 2 data-plane threads, 2 and 4
/// workers, 16 MiB each; the variants interleaved, medians of `REPS` runs.
fn threads_table() {
    const REPS: usize = 5;
    let variants = [(1, 1), (1, 2), (2, 2)];
    println!("# 16 MiB f32 sum per worker, loopback, thread workers; median of {REPS} runs");
    println!(
        "{:>8} {:>8} {:>6} {:>10} {:>12}",
        "workers", "threads", "trees", "time_ms", "input_GB/s"
    );
    for n in [2, 4] {
        let mut runs = vec![Vec::new(); variants.len()];
        for _ in 0..REPS {
            for (v, &(threads, trees)) in variants.iter().enumerate() {
                runs[v].push(time_on_threads(n, 16 << 20, 3, 0.0, threads, trees));
            }
        }
        for (v, &(threads, trees)) in variants.iter().enumerate() {
            let t = &mut runs[v];
            t.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let med = t[t.len() / 2];
            let gbs = (n * (16 << 20)) as f64 / med / 1e9;
            println!(
                "{n:>8} {threads:>8} {trees:>6} {:>10.1} {gbs:>12.2}",
                med * 1e3
            );
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "threads") {
        return threads_table();
    }
    let quick = std::env::args().any(|a| a == "quick");
    println!("# switch core alone (packet processing, no sockets), f32, 64 MiB per worker");
    for n in [2, 4, 8] {
        println!(
            "{n:>8} workers {:>8.2} GB/s of worker input",
            core_throughput(n, 64 << 20)
        );
    }
    let per = max_count(1472, WireType::F32);
    let (header, whole) = (tag_ns(TAGGED_LEN), tag_ns(TAGGED_LEN + per * 4));
    println!("# packet tag (HalfSipHash-2-4-64), one core");
    println!(
        "{:>8.1} ns per packet over the {TAGGED_LEN}-byte header (as sent)",
        header
    );
    println!(
        "{:>8.1} ns per packet if it covered the {}-byte payload too",
        whole,
        per * 4
    );
    if std::env::args().any(|a| a == "core") {
        return;
    }
    let big = if quick { 16 << 20 } else { 64 << 20 };
    let loss_only = std::env::args().any(|a| a == "loss");
    println!("# switch throughput: f32 sum, {} MiB per worker, one switch core, loopback, thread workers", big >> 20);
    println!("{:>8} {:>10} {:>16}", "workers", "time_ms", "input_GB/s");
    for n in [2, 4, 8].into_iter().filter(|_| !loss_only) {
        let t = time_allreduce(n, big, 1, 0.0);
        println!(
            "{n:>8} {:>10.1} {:>16.3}",
            t * 1e3,
            (n * big) as f64 / t / 1e9
        );
    }
    println!("\n# ina allreduce time: 4 thread workers, f32 sum, loopback");
    println!("{:>10} {:>10} {:>12}", "bytes", "time_ms", "algbw_GB/s");
    let mut size = 1 << 20;
    while size <= big && !loss_only {
        let t = time_allreduce(4, size, if size <= 4 << 20 { 5 } else { 1 }, 0.0);
        println!(
            "{size:>10} {:>10.2} {:>12.3}",
            t * 1e3,
            size as f64 / t / 1e9
        );
        size *= 4;
    }
    let size = if quick { 4 << 20 } else { 16 << 20 };
    let clean = time_allreduce(4, size, 3, 0.0);
    let lossy = time_allreduce(4, size, 3, 0.01);
    println!(
        "\n# loss: 4 workers, {} MiB, 1% of packets dropped at the switch",
        size >> 20
    );
    println!(
        "no loss {:.1} ms, 1% loss {:.1} ms, throughput ratio {:.2}",
        clean * 1e3,
        lossy * 1e3,
        clean / lossy
    );
}
