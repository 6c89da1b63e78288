//! The INA client: every rank of a job joins, then runs allreduce through
//! the job's aggregation trees.

mod allreduce;
pub mod cc;
pub mod faults;
pub mod session;
mod spec;
pub mod window;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use shoal_bootstrap::auth::Key;
use shoal_bootstrap::KvStore;

pub use allreduce::PeerCheck;
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

/// The keys a rank needs to use switches.
#[derive(Clone, Debug)]
pub struct InaKeys {
    /// The job's INA key, derived from the job secret: every rank holds it
    /// without asking anyone, and each admission's packet key derives from
    /// it and a public nonce.
    pub job: Key,
    /// The switch secret's key: it authenticates rank 0 to the switches
    /// (and them to it) and wraps the packet keys it registers.
    pub switch: Key,
}

#[derive(Clone, Debug)]
pub struct InaConfig {
    pub rank: usize,
    pub world: usize,
    pub keys: InaKeys,
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
    /// Without results for this long, a waiting call asks whether the other
    /// ranks are alive (the host transport knows within milliseconds).
    pub peer_check_after: Duration,
    pub connect_timeout: Duration,
    /// Test knob: duplicate and reorder outgoing packets.
    pub faults: Faults,
}

impl InaConfig {
    pub fn new(rank: usize, world: usize, trees: Vec<TreeSpec>, keys: InaKeys) -> InaConfig {
        InaConfig {
            rank,
            world,
            keys,
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
            peer_check_after: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(2),
            faults: Faults::default(),
        }
    }

    /// Whether `SHOAL_SWITCH` names a switch: only then does a job need
    /// switch keys at all.
    pub fn switch_configured(env: &dyn Fn(&str) -> Option<String>) -> bool {
        env("SHOAL_SWITCH").is_some_and(|s| !s.trim().is_empty())
    }

    /// `SHOAL_SWITCH`: trees of switches (`spec.rs` has the syntax).
    /// `Ok(None)` when no switch is set. The `SHOAL_INA_*` tuning variables
    /// are read and checked with the rest of the runtime's configuration
    /// (shoal-core's `config.rs`), which sets the fields they control. An invalid value is `InaError::Config` naming its variable; a
    /// switch name that does not resolve is `Unreachable` (a reason to fall
    /// back, like a switch that does not answer).
    pub fn from_env(
        rank: usize,
        world: usize,
        keys: InaKeys,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<InaConfig>, InaError> {
        if !Self::switch_configured(env) {
            return Ok(None);
        }
        let mut cfg = InaConfig::new(rank, world, Vec::new(), keys);
        let switches = env("SHOAL_SWITCH").unwrap_or_default();
        cfg.trees = spec::switch_trees(&switches)?;
        Ok(Some(cfg))
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

pub(crate) fn config(var: &str, value: &str, what: &str) -> InaError {
    InaError::Config(format!("{var}={value:?}: {what}"))
}

/// One tree as this rank uses it across calls.
struct Tree {
    p: TreeParams,
    next_seq: u32,
    cc: cc::Window,
    rto: cc::Rto,
}

/// A rank's membership in an INA job.
/// What the last allreduce did on the wire, for traces: packets sent (first
/// sends and retransmissions), retransmission timeouts, results that carried
/// an ECN mark, and each tree's congestion window when it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallStats {
    pub packets: u64,
    pub retransmitted: u64,
    pub timeouts: u64,
    pub marked: u64,
    pub windows: Vec<usize>,
}

pub struct InaClient {
    cfg: InaConfig,
    /// Of the last allreduce (see [`InaClient::last_call`]).
    stats: CallStats,
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
            stats: CallStats::default(),
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

    /// What the switches admitted, in words (for the log): each tree's
    /// switch, job id, slots and window, and how float32 travels.
    pub fn admission(&self) -> String {
        let trees: Vec<String> =
            self.trees
                .iter()
                .map(|t| {
                    let p = &t.p;
                    format!(
                    "switch {} job {} ({} slots, window up to {}, {}-byte payloads, {} workers)",
                    p.data, p.job, p.slots, t.cc.limit(), p.budget, p.workers
                )
                })
                .collect();
        let f32_wire = if self.cfg.f32_as_int32 {
            "int32 with a shared exponent (SHOAL_INA_INT32=1)"
        } else {
            "float32"
        };
        format!(
            "{} tree(s): {}; float32 travels as {f32_wire}",
            trees.len(),
            trees.join("; ")
        )
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
            let msg = CtrlMsg::Release { job: l.job };
            session::request(&mut l.stream, &msg, self.cfg.connect_timeout)?;
        }
        Ok(())
    }
}
