//! The INA client: every rank of a job joins, then runs allreduce through
//! the job's aggregation trees.

mod allreduce;
pub mod cc;
pub mod faults;
pub mod session;
pub mod window;

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

use shoal_transport::KvStore;

pub use faults::Faults;
use session::{Lease, TreeParams};

use crate::control::CtrlMsg;
use crate::net::Batch;
use crate::proto::{WireType, DEFAULT_PAYLOAD_BUDGET};
use crate::InaError;

/// A leaf switch of a two-level tree and the ranks attached to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafSpec {
    /// Control (TCP) address of the leaf; it must run with `--parent` = the root.
    pub control: SocketAddr,
    pub ranks: Vec<usize>,
}

/// One aggregation tree: a root switch, and optionally leaves below it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeSpec {
    /// Control (TCP) address of the root switch.
    pub root: SocketAddr,
    /// Empty: every rank talks to the root directly.
    pub leaves: Vec<LeafSpec>,
}

impl TreeSpec {
    pub fn flat(root: SocketAddr) -> TreeSpec {
        TreeSpec {
            root,
            leaves: Vec::new(),
        }
    }
}

/// PANAMA's partial aggregation: emit a result once `fraction` of the
/// members contributed, or `deadline` after the first contribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Partial {
    pub fraction: f64,
    pub deadline: Option<Duration>,
}

#[derive(Clone, Debug)]
pub struct InaConfig {
    pub rank: usize,
    pub world: usize,
    /// Several trees: chunks are spread over them round-robin.
    pub trees: Vec<TreeSpec>,
    /// Store key namespace, unique per job (and per join within a job).
    pub key_prefix: String,
    /// Largest UDP payload this rank sends (the path MTU budget).
    pub payload_budget: usize,
    /// Send f32 as int32 with a per-packet exponent (SwitchML) instead of float.
    pub f32_as_int32: bool,
    /// Largest slot pool (and window) asked of each switch.
    pub max_slots: u16,
    pub init_window: u16,
    pub partial: Option<Partial>,
    pub rto_initial: Duration,
    pub rto_min: Duration,
    pub rto_max: Duration,
    /// No result for this long while packets are outstanding: `SwitchDied`.
    pub dead_timeout: Duration,
    pub connect_timeout: Duration,
    /// Test knob: duplicate and reorder outgoing packets.
    pub faults: Faults,
}

impl InaConfig {
    pub fn new(rank: usize, world: usize, trees: Vec<TreeSpec>) -> InaConfig {
        InaConfig {
            rank,
            world,
            trees,
            key_prefix: "ina/".into(),
            payload_budget: DEFAULT_PAYLOAD_BUDGET,
            f32_as_int32: false,
            max_slots: 512,
            init_window: 16,
            partial: None,
            rto_initial: Duration::from_millis(20),
            rto_min: Duration::from_millis(5),
            rto_max: Duration::from_millis(500),
            dead_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            faults: Faults::default(),
        }
    }

    /// `SHOAL_SWITCH=host:port[,host:port...]` (one flat tree per switch),
    /// `SHOAL_INA_TIMEOUT` (seconds, default 10), `SHOAL_INA_INT32=1`,
    /// `SHOAL_INA_PAYLOAD` (bytes, default 1472). `None` when no switch is set.
    pub fn from_env(rank: usize, world: usize) -> Option<Result<InaConfig, InaError>> {
        let switches = std::env::var("SHOAL_SWITCH")
            .ok()
            .filter(|s| !s.is_empty())?;
        Some(Self::parse_env(rank, world, &switches))
    }

    fn parse_env(rank: usize, world: usize, switches: &str) -> Result<InaConfig, InaError> {
        let mut trees = Vec::new();
        for s in switches.split(',') {
            let addr = s
                .trim()
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| {
                    InaError::Unreachable(format!("SHOAL_SWITCH: cannot resolve {s:?}"))
                })?;
            trees.push(TreeSpec::flat(addr));
        }
        let mut cfg = InaConfig::new(rank, world, trees);
        let var = |k: &str| std::env::var(k).ok();
        if let Some(t) = var("SHOAL_INA_TIMEOUT").and_then(|v| v.parse::<f64>().ok()) {
            cfg.dead_timeout = Duration::from_secs_f64(t.max(0.001));
        }
        cfg.f32_as_int32 = var("SHOAL_INA_INT32").is_some_and(|v| v == "1");
        if let Some(p) = var("SHOAL_INA_PAYLOAD").and_then(|v| v.parse().ok()) {
            cfg.payload_budget = p;
        }
        Ok(cfg)
    }

    /// Element types the job asks the switches to accept.
    pub fn wire_mask(&self) -> u8 {
        if self.f32_as_int32 {
            WireType::I32.mask_bit()
        } else {
            [WireType::F32, WireType::I32, WireType::F16, WireType::Bf16]
                .iter()
                .fold(0, |m, w| m | w.mask_bit())
        }
    }
}

/// One tree as this rank uses it across calls.
struct Tree {
    p: TreeParams,
    next_seq: u32,
    cc: cc::Window,
    rto: cc::Rto,
}

/// A rank's membership in an INA job.
pub struct InaClient {
    cfg: InaConfig,
    trees: Vec<Tree>,
    sock: UdpSocket,
    leases: Vec<Lease>,
    faults: faults::Injector,
    /// Results are received and packets sent in batches, one system call each.
    rx: Batch,
    tx: Batch,
}

/// Messages received per system call (each a result, or with GRO a run of them).
const RX_BATCH: usize = 32;
/// Packets sent per system call: a window's worth.
const TX_BATCH: usize = 512;

impl InaClient {
    /// Called by every rank of the job: rank 0 admits the job with the
    /// switches and publishes the parameters through `store`.
    pub fn join(cfg: &InaConfig, store: &dyn KvStore) -> Result<InaClient, InaError> {
        if cfg.trees.is_empty() || cfg.rank >= cfg.world {
            return Err(InaError::Protocol("no trees, or rank out of range".into()));
        }
        let (params, leases) = session::establish(cfg, store)?;
        let loopback = params.iter().all(|p| p.data.ip().is_loopback());
        let bind = if loopback { "127.0.0.1:0" } else { "0.0.0.0:0" };
        let sock =
            UdpSocket::bind(bind).map_err(|e| InaError::Unreachable(format!("udp bind: {e}")))?;
        sock.set_nonblocking(true)
            .map_err(|e| InaError::Unreachable(format!("udp socket: {e}")))?;
        // Room for a full window of results of every tree; a smaller buffer
        // (unprivileged, low rmem_max) bounds the windows instead, since a
        // result dropped by the host costs a retransmission timeout.
        let budget = params.iter().map(|p| p.budget).max().unwrap_or(0);
        let window_bytes: usize = params
            .iter()
            .map(|p| p.limit as usize * (p.budget + crate::net::DATAGRAM_OVERHEAD))
            .sum();
        let bufs = crate::net::set_buffers(&sock, window_bytes.clamp(8 << 20, 256 << 20));
        let per_tree = crate::net::buffer_packets(bufs.recv, budget) / params.len().max(1);
        let trees = params
            .into_iter()
            .map(|p| Tree {
                cc: cc::Window::new(
                    cfg.init_window,
                    p.cwnd_cap,
                    p.limit.min(per_tree.clamp(1, u16::MAX as usize) as u16),
                ),
                rto: cc::Rto::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max),
                next_seq: 0,
                p,
            })
            .collect();
        let rx = Batch::receiver(&sock, RX_BATCH, budget.next_multiple_of(64).max(64));
        Ok(InaClient {
            cfg: cfg.clone(),
            trees,
            sock,
            leases,
            faults: faults::Injector::new(cfg.faults),
            rx,
            tx: Batch::sender(TX_BATCH),
        })
    }

    pub fn rank(&self) -> usize {
        self.cfg.rank
    }

    pub fn world(&self) -> usize {
        self.cfg.world
    }

    /// Trees this rank uses (one per switch hierarchy).
    pub fn tree_count(&self) -> usize {
        self.trees.len()
    }

    /// Leaves the job: every rank reports through the store, then rank 0
    /// releases the job on every switch. Dropping a client without `close`
    /// also releases (rank 0's control connections close), but may cut off
    /// ranks still running.
    pub fn close(mut self, store: &dyn KvStore) -> Result<(), InaError> {
        let io = |e: std::io::Error| InaError::Protocol(format!("store: {e}"));
        let key = |r: usize| format!("{}closed/{r}", self.cfg.key_prefix);
        store.set(&key(self.cfg.rank), b"1").map_err(io)?;
        if self.cfg.rank != 0 {
            return Ok(());
        }
        for r in 1..self.cfg.world {
            store.get(&key(r)).map_err(io)?;
        }
        for mut l in self.leases.drain(..) {
            let msg = CtrlMsg::Release {
                job: l.job,
                token: l.token,
            };
            session::request(&mut l.stream, &msg, self.cfg.connect_timeout)?;
        }
        Ok(())
    }
}
