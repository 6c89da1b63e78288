//! Switch counters and their Prometheus text exposition over HTTP.
//!
//! Each data-plane thread counts into its own `ShardCounters` (one cache
//! line apart from its neighbours, so threads never contend on a counter);
//! totals are summed when read. The event loops only do relaxed atomic
//! adds; the per-job table is locked on admission, release and scrape,
//! never per packet.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why a packet was dropped instead of aggregated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    Malformed,
    Version,
    UnknownJob,
    /// The tag does not match the job's key: forged, or of another job.
    BadTag,
    /// A member's packet from another address than the one it is bound to.
    BadSource,
    BadTree,
    BadMember,
    BadType,
    BadCount,
    BadSlot,
    /// Same sequence number, different type, op or count than the first contribution.
    Mismatch,
    /// A sequence number older than the slot's current use.
    Stale,
    /// The switch's memory is exhausted.
    NoMemory,
    /// The `--drop-rate` test knob.
    Injected,
    /// A result packet that matches no uplink.
    UnexpectedResult,
}

impl DropReason {
    pub const ALL: [DropReason; 15] = [
        DropReason::Malformed,
        DropReason::Version,
        DropReason::UnknownJob,
        DropReason::BadTag,
        DropReason::BadSource,
        DropReason::BadTree,
        DropReason::BadMember,
        DropReason::BadType,
        DropReason::BadCount,
        DropReason::BadSlot,
        DropReason::Mismatch,
        DropReason::Stale,
        DropReason::NoMemory,
        DropReason::Injected,
        DropReason::UnexpectedResult,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::Version => "version",
            DropReason::UnknownJob => "unknown_job",
            DropReason::BadTag => "bad_tag",
            DropReason::BadSource => "bad_source",
            DropReason::BadTree => "bad_tree",
            DropReason::BadMember => "bad_member",
            DropReason::BadType => "bad_type",
            DropReason::BadCount => "bad_count",
            DropReason::BadSlot => "bad_slot",
            DropReason::Mismatch => "mismatch",
            DropReason::Stale => "stale",
            DropReason::NoMemory => "no_memory",
            DropReason::Injected => "injected",
            DropReason::UnexpectedResult => "unexpected_result",
        }
    }
}

/// Why the switch closed a control connection without serving it (further).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// It did not prove that it holds the switch secret.
    Unauthorized,
    /// It sent a frame that does not parse, or a message out of order.
    BadFrame,
    /// Its client already has `--max-conns-per-client` connections.
    Busy,
    /// It did not authenticate in time, or idled without a job.
    Timeout,
    /// Closed unauthenticated to make room for a newer connection.
    Evicted,
}

impl Refused {
    pub const ALL: [Refused; 5] = [
        Refused::Unauthorized,
        Refused::BadFrame,
        Refused::Busy,
        Refused::Timeout,
        Refused::Evicted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Refused::Unauthorized => "unauthorized",
            Refused::BadFrame => "bad_frame",
            Refused::Busy => "busy",
            Refused::Timeout => "timeout",
            Refused::Evicted => "evicted",
        }
    }
}

/// Per-job counters and gauges.
#[derive(Default)]
pub struct JobStats {
    pub members: AtomicU64,
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub aggregations: AtomicU64,
    pub memory_bytes: AtomicU64,
}

/// Picks one counter of a thread.
type Counter = fn(&ShardCounters) -> &AtomicU64;
/// Reads one value of a thread.
type Reading = fn(&ShardCounters) -> u64;

/// The counters one data-plane thread (shard) updates per packet. Aligned
/// to 128 bytes so that two threads' counters never share a cache line.
#[derive(Default)]
#[repr(align(128))]
pub struct ShardCounters {
    pub rx_packets: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub tx_packets: AtomicU64,
    pub tx_bytes: AtomicU64,
    pub aggregations: AtomicU64,
    pub partial_aggregations: AtomicU64,
    pub retransmissions: AtomicU64,
    pub duplicates: AtomicU64,
    pub results_resent: AtomicU64,
    pub ecn_marks: AtomicU64,
    pub overflows: AtomicU64,
    /// Jobs placed on this shard now.
    pub jobs: AtomicU64,
    pub memory_bytes: AtomicU64,
    pub memory_capacity_bytes: AtomicU64,
    drops: [AtomicU64; DropReason::ALL.len()],
}

impl ShardCounters {
    pub fn count_drop(&self, r: DropReason) {
        self.drops[r as usize].fetch_add(1, Relaxed);
    }

    pub fn drops(&self, r: DropReason) -> u64 {
        self.drops[r as usize].load(Relaxed)
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(|d| d.load(Relaxed)).sum()
    }
}

pub struct Metrics {
    shards: Vec<ShardCounters>,
    pub jobs_admitted: AtomicU64,
    pub jobs_refused: AtomicU64,
    pub jobs_released: AtomicU64,
    /// Open control connections, authenticated or not.
    pub control_connections: AtomicU64,
    refused: [AtomicU64; Refused::ALL.len()],
    jobs: Mutex<BTreeMap<u32, Arc<JobStats>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(1)
    }
}

impl Metrics {
    /// Counters of a switch with `threads` data-plane threads.
    pub fn new(threads: usize) -> Metrics {
        Metrics {
            shards: (0..threads.max(1))
                .map(|_| ShardCounters::default())
                .collect(),
            jobs_admitted: AtomicU64::new(0),
            jobs_refused: AtomicU64::new(0),
            jobs_released: AtomicU64::new(0),
            control_connections: AtomicU64::new(0),
            refused: Default::default(),
            jobs: Mutex::new(BTreeMap::new()),
        }
    }

    /// The counters of data-plane thread `i`.
    pub fn shard(&self, i: usize) -> &ShardCounters {
        &self.shards[i]
    }

    pub fn shards(&self) -> &[ShardCounters] {
        &self.shards
    }

    /// A counter summed over every data-plane thread.
    pub fn total(&self, counter: impl Fn(&ShardCounters) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| counter(s).load(Relaxed)).sum()
    }

    pub fn drops(&self, r: DropReason) -> u64 {
        self.shards.iter().map(|s| s.drops(r)).sum()
    }

    pub fn total_drops(&self) -> u64 {
        self.shards.iter().map(|s| s.total_drops()).sum()
    }

    pub fn count_refusal(&self, r: Refused) {
        self.refused[r as usize].fetch_add(1, Relaxed);
    }

    pub fn refusals(&self, r: Refused) -> u64 {
        self.refused[r as usize].load(Relaxed)
    }

    pub fn add_job(&self, job: u32, stats: Arc<JobStats>) {
        self.jobs.lock().unwrap().insert(job, stats);
    }

    pub fn remove_job(&self, job: u32) {
        self.jobs.lock().unwrap().remove(&job);
    }

    /// Prometheus text format, version 0.0.4.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let shard_counters: [(&str, Counter); 11] = [
            ("rx_packets_total", |c| &c.rx_packets),
            ("rx_bytes_total", |c| &c.rx_bytes),
            ("tx_packets_total", |c| &c.tx_packets),
            ("tx_bytes_total", |c| &c.tx_bytes),
            ("aggregations_total", |c| &c.aggregations),
            ("partial_aggregations_total", |c| &c.partial_aggregations),
            ("retransmissions_total", |c| &c.retransmissions),
            ("duplicates_total", |c| &c.duplicates),
            ("results_resent_total", |c| &c.results_resent),
            ("ecn_marks_total", |c| &c.ecn_marks),
            ("int32_overflows_total", |c| &c.overflows),
        ];
        for (name, counter) in shard_counters {
            let _ = writeln!(s, "# TYPE shoal_switch_{name} counter");
            let _ = writeln!(s, "shoal_switch_{name} {}", self.total(counter));
        }
        for (name, v) in [
            ("jobs_admitted_total", &self.jobs_admitted),
            ("jobs_refused_total", &self.jobs_refused),
            ("jobs_released_total", &self.jobs_released),
        ] {
            let _ = writeln!(s, "# TYPE shoal_switch_{name} counter");
            let _ = writeln!(s, "shoal_switch_{name} {}", v.load(Relaxed));
        }
        let _ = writeln!(s, "# TYPE shoal_switch_memory_bytes gauge");
        let used = self.total(|c| &c.memory_bytes);
        let _ = writeln!(s, "shoal_switch_memory_bytes {used}");
        let _ = writeln!(s, "# TYPE shoal_switch_memory_capacity_bytes gauge");
        let cap = self.total(|c| &c.memory_capacity_bytes);
        let _ = writeln!(s, "shoal_switch_memory_capacity_bytes {cap}");
        let _ = writeln!(s, "# TYPE shoal_switch_drops_total counter");
        for r in DropReason::ALL {
            let v = self.drops(r);
            let _ = writeln!(s, "shoal_switch_drops_total{{reason=\"{}\"}} {v}", r.name());
        }
        let _ = writeln!(s, "# TYPE shoal_switch_control_connections gauge");
        let open = self.control_connections.load(Relaxed);
        let _ = writeln!(s, "shoal_switch_control_connections {open}");
        let _ = writeln!(s, "# TYPE shoal_switch_control_refused_total counter");
        for r in Refused::ALL {
            let v = self.refusals(r);
            let name = r.name();
            let _ = writeln!(
                s,
                "shoal_switch_control_refused_total{{reason=\"{name}\"}} {v}"
            );
        }
        self.render_threads(&mut s);
        self.render_jobs(&mut s);
        s
    }

    /// Per data-plane thread: what each core receives, sends and drops, and
    /// how many jobs it serves (to see whether the load is spread).
    fn render_threads(&self, s: &mut String) {
        let _ = writeln!(s, "# TYPE shoal_switch_threads gauge");
        let _ = writeln!(s, "shoal_switch_threads {}", self.shards.len());
        let per_thread: [(&str, &str, Reading); 6] = [
            ("thread_rx_packets_total", "counter", |c| {
                c.rx_packets.load(Relaxed)
            }),
            ("thread_rx_bytes_total", "counter", |c| {
                c.rx_bytes.load(Relaxed)
            }),
            ("thread_tx_packets_total", "counter", |c| {
                c.tx_packets.load(Relaxed)
            }),
            ("thread_tx_bytes_total", "counter", |c| {
                c.tx_bytes.load(Relaxed)
            }),
            ("thread_drops_total", "counter", |c| c.total_drops()),
            ("thread_jobs", "gauge", |c| c.jobs.load(Relaxed)),
        ];
        for (name, kind, value) in per_thread {
            let _ = writeln!(s, "# TYPE shoal_switch_{name} {kind}");
            for (i, c) in self.shards.iter().enumerate() {
                let _ = writeln!(s, "shoal_switch_{name}{{thread=\"{i}\"}} {}", value(c));
            }
        }
    }

    fn render_jobs(&self, s: &mut String) {
        let jobs = self.jobs.lock().unwrap();
        let _ = writeln!(s, "# TYPE shoal_switch_active_jobs gauge");
        let _ = writeln!(s, "shoal_switch_active_jobs {}", jobs.len());
        for (name, kind) in [
            ("job_members", "gauge"),
            ("job_packets_total", "counter"),
            ("job_bytes_total", "counter"),
            ("job_aggregations_total", "counter"),
            ("job_memory_bytes", "gauge"),
        ] {
            let _ = writeln!(s, "# TYPE shoal_switch_{name} {kind}");
            for (id, j) in jobs.iter() {
                let v = match name {
                    "job_members" => &j.members,
                    "job_packets_total" => &j.packets,
                    "job_bytes_total" => &j.bytes,
                    "job_aggregations_total" => &j.aggregations,
                    _ => &j.memory_bytes,
                };
                let _ = writeln!(s, "shoal_switch_{name}{{job=\"{id}\"}} {}", v.load(Relaxed));
            }
        }
    }
}

/// Serves `GET /metrics` (any path, in fact) until `stop` is set.
pub fn serve_http(listener: TcpListener, metrics: Arc<Metrics>, stop: Arc<AtomicBool>) {
    let _ = listener.set_nonblocking(true);
    while !stop.load(Relaxed) {
        match listener.accept() {
            Ok((mut conn, _)) => {
                let _ = conn.set_nonblocking(false);
                let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
                let mut req = [0u8; 2048];
                let _ = conn.read(&mut req);
                let body = metrics.render();
                let head = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(body.as_bytes());
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}
