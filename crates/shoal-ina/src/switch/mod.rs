//! The software aggregation switch (`shoal switch`): `--threads` cores run
//! the UDP data plane, each with its own socket (port) and its own jobs
//! (`placement`), control threads authenticate tenants and admit and
//! release jobs over TCP, and an optional HTTP endpoint serves Prometheus
//! metrics, per thread too.

mod args;
mod control;
pub mod core;
mod event_loop;
pub mod jobs;
pub mod metrics;
mod placement;
pub mod slots;

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use shoal_bootstrap::auth::Key;
use tracing::{error, info};

pub use args::{command, parse_args, ArgsError};
pub use control::ControlLimits;
pub use metrics::{DropReason, Metrics, Refused};

use crate::proto::DEFAULT_PAYLOAD_BUDGET;

#[derive(Clone, Debug)]
pub struct SwitchConfig {
    /// UDP data plane address of thread 0 (threads 1.. bind ephemeral
    /// ports on the same address, announced per job in `ADMIT_OK`).
    pub listen: SocketAddr,
    /// Data-plane threads (cores).
    pub threads: usize,
    /// TCP control address (the daemon uses the `listen` port).
    pub control: SocketAddr,
    /// Aggregation memory budget in bytes, shared fairly among jobs.
    pub memory: usize,
    pub metrics: Option<SocketAddr>,
    /// UDP address of the parent switch: this switch is then a leaf that
    /// sends partial sums up for jobs admitted with an uplink.
    pub parent: Option<SocketAddr>,
    /// Test knob: fraction of received packets dropped before parsing.
    pub drop_rate: f64,
    pub seed: u64,
    /// Largest UDP payload accepted (and announced to clients).
    pub payload_budget: usize,
    pub max_jobs: usize,
    /// Largest slot pool (window) granted to one job.
    pub max_slots: u16,
    /// Fraction of memory in use past which results carry ECN.
    pub ecn_threshold: f64,
    /// Refuse float element types, like a switch ASIC without float units.
    pub int_only: bool,
    /// Kernel socket buffer size requested for the data socket (each way).
    /// Windows are capped so that every member's window fits in what the
    /// kernel grants (`SO_RCVBUFFORCE` when privileged, else up to
    /// `net.core.rmem_max`).
    pub socket_buffer: usize,
    /// The key of the switch secret: control connections must prove that
    /// they hold it before they may admit a job.
    pub secret: Key,
    pub limits: ControlLimits,
}

impl SwitchConfig {
    /// The defaults of `shoal switch`, with the key of its secret.
    pub fn new(secret: Key) -> Self {
        let any: SocketAddr = "0.0.0.0:9800".parse().unwrap();
        SwitchConfig {
            listen: any,
            threads: default_threads(),
            control: any,
            memory: 64 << 20,
            metrics: None,
            parent: None,
            drop_rate: 0.0,
            seed: 1,
            payload_budget: DEFAULT_PAYLOAD_BUDGET,
            max_jobs: 64,
            max_slots: 512,
            ecn_threshold: 0.8,
            int_only: false,
            socket_buffer: 32 << 20,
            secret,
            limits: ControlLimits::default(),
        }
    }

    /// A loopback switch on ephemeral ports, for tests and benchmarks.
    pub fn loopback(secret: Key) -> SwitchConfig {
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        SwitchConfig {
            listen: lo,
            control: lo,
            ..SwitchConfig::new(secret)
        }
    }
}

/// One data-plane thread per core by default.
pub fn default_threads() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// A running switch; dropping it stops it.
pub struct SwitchHandle {
    /// Data address of thread 0 (the listen address).
    pub data_addr: SocketAddr,
    /// Data address of every data-plane thread.
    pub data_addrs: Vec<SocketAddr>,
    pub control_addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub metrics: Arc<Metrics>,
    /// Receive buffer of the data socket in effect, in bytes.
    pub rx_buffer: usize,
    /// Datagrams of the payload budget that buffer holds.
    pub rx_buffer_packets: usize,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl SwitchHandle {
    /// Stops every thread and closes every socket: members see a dead switch.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for SwitchHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `bind(addr)`, its error naming what was bound where: "cannot start:
/// Address already in use" alone does not say which of the switch's ports
/// (data, control, metrics) is taken.
fn bound<T>(what: &str, addr: SocketAddr, bind: fn(SocketAddr) -> io::Result<T>) -> io::Result<T> {
    bind(addr).map_err(|e| io::Error::new(e.kind(), format!("the {what} address {addr}: {e}")))
}

/// Binds the sockets and starts the switch's threads.
pub fn spawn(cfg: SwitchConfig) -> io::Result<SwitchHandle> {
    let threads = cfg.threads.max(1);
    let mut socks = vec![bound("data (UDP)", cfg.listen, UdpSocket::bind)?];
    for _ in 1..threads {
        let any_port = SocketAddr::new(cfg.listen.ip(), 0);
        socks.push(bound("data (UDP)", any_port, UdpSocket::bind)?);
    }
    let control = bound("control (TCP)", cfg.control, TcpListener::bind)?;
    let metrics_listener = cfg
        .metrics
        .map(|addr| bound("metrics (TCP)", addr, TcpListener::bind))
        .transpose()?;
    let metrics = Arc::new(Metrics::new(threads));
    let stop = Arc::new(AtomicBool::new(false));
    let data_addrs = socks
        .iter()
        .map(|s| s.local_addr())
        .collect::<io::Result<Vec<_>>>()?;
    let control_addr = control.local_addr()?;
    let metrics_addr = metrics_listener
        .as_ref()
        .map(|l| l.local_addr())
        .transpose()?;
    let (mut senders, mut handles, mut rx_buffer, mut rx_buffer_packets) = (vec![], vec![], 0, 0);
    for (index, udp) in socks.into_iter().enumerate() {
        let bufs = crate::net::set_buffers(&udp, cfg.socket_buffer);
        let packets = crate::net::buffer_packets(bufs.recv, cfg.payload_budget);
        (rx_buffer, rx_buffer_packets) = (bufs.recv, packets);
        let shard = core::Shard {
            index,
            count: threads,
        };
        let port = data_addrs[index].port();
        let mut core = core::SwitchCore::shard(&cfg, port, metrics.clone(), shard);
        core.jobs.rx_packets = packets;
        let (tx, rx) = channel();
        senders.push(tx);
        let s = stop.clone();
        handles.push(named(&format!("shoal-switch-udp{index}"), move || {
            event_loop::run_loop(udp, core, rx, &s)
        })?);
    }
    let shards = placement::Placement::new(senders, cfg.max_jobs, metrics.clone());
    let ctx = control::Ctx::new(
        cfg.secret.clone(),
        cfg.limits.clone(),
        shards,
        metrics.clone(),
    );
    let s = stop.clone();
    handles.push(named("shoal-switch-ctl", move || {
        control::serve(control, Arc::new(ctx), s)
    })?);
    if let Some(l) = metrics_listener {
        let (m, s) = (metrics.clone(), stop.clone());
        handles.push(named("shoal-switch-http", move || {
            metrics::serve_http(l, m, s)
        })?);
    }
    Ok(SwitchHandle {
        data_addr: data_addrs[0],
        data_addrs,
        control_addr,
        metrics_addr,
        metrics,
        rx_buffer,
        rx_buffer_packets,
        stop,
        threads: handles,
    })
}

fn named(name: &str, f: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    thread::Builder::new().name(name.into()).spawn(f)
}

static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Relaxed);
}

/// Finds the switch secret: from `--secret-file` when given, else from the
/// environment (`SHOAL_SWITCH_SECRET`, ...); returns its key.
pub type SecretLoader<'a> = &'a dyn Fn(Option<&Path>) -> Result<Key, SecretUnavailable>;

/// Why the loader found no switch secret (its own error, whatever its type).
pub type SecretUnavailable = Box<dyn std::error::Error + Send + Sync>;

/// `shoal switch ARGS...`: runs the daemon until SIGINT or SIGTERM; returns
/// the process exit code. The previous signal handlers are restored. A bad
/// command line is printed with the usage; the daemon's life (its
/// addresses, jobs admitted and released, failure to start) is logged.
pub fn daemon_main(argv: &[String], load_secret: SecretLoader<'_>) -> i32 {
    let cfg = match parse_args(argv, load_secret) {
        Ok(c) => c,
        // clap's own output: the help (on stdout, 0), or the error with
        // the usage (on stderr, 2).
        Err(ArgsError::Cli(e)) => {
            let _ = e.print();
            return e.exit_code();
        }
        Err(e) => {
            eprintln!("shoal switch: {e}\n\n{}", command().render_usage());
            return 2;
        }
    };
    SIGNALLED.store(false, Relaxed);
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is signal-safe.
    let old = unsafe {
        [
            libc::signal(libc::SIGINT, handler),
            libc::signal(libc::SIGTERM, handler),
        ]
    };
    let code = match spawn(cfg) {
        Ok(h) => {
            info!(
                "listening: data udp {} control tcp {}{} ({} data-plane threads, receive buffer {} KiB: {} packets each)",
                h.data_addrs
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                h.control_addr,
                h.metrics_addr
                    .map(|a| format!(" metrics http://{a}/metrics"))
                    .unwrap_or_default(),
                h.data_addrs.len(),
                h.rx_buffer >> 10,
                h.rx_buffer_packets
            );
            while !SIGNALLED.load(Relaxed) {
                thread::sleep(Duration::from_millis(50));
            }
            info!("stopping");
            h.stop();
            0
        }
        Err(e) => {
            error!("cannot start: {e}");
            1
        }
    };
    // SAFETY: restoring the handlers that were installed before.
    unsafe {
        libc::signal(libc::SIGINT, old[0]);
        libc::signal(libc::SIGTERM, old[1]);
    }
    code
}
