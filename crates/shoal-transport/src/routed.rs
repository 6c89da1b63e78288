//! The transport the core uses: shm for ranks on this host, and for the rest
//! tcp, or UCX when asked ([`Net::Ucx`]; without shm, UCX reaches every rank).
//!
//! Shm and tcp ring one [`Doorbell`] (the shm segment's, which tcp's I/O
//! threads ring too), so `wait` sleeps once and wakes on either; UCX rings
//! nothing (it moves only when polled), so with a UCX side beside shm
//! `wait` naps briefly instead ([`crate::ucx::NAP`]); UCX alone sleeps on
//! its worker's event fd. Request ids are the inner id
//! shifted left by one with the low bit naming the side (shm, or the network
//! side: tcp or UCX, never both).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::auth::Key;
use crate::doorbell::{wait_on, Doorbell, WaitPolicy};
use crate::setup::{agree, SetupRecord};
use crate::shm::{
    ShmConfig, ShmTransport, DEFAULT_CMA_MIN_CALL, DEFAULT_CMA_THRESHOLD, DEFAULT_RING_SIZE,
    DEFAULT_RUN_AHEAD, DEFAULT_SLOT_SIZE,
};
use crate::tcp::{Congestion, TcpConfig, TcpTransport};
use crate::ucx::{wait_busy, UcxConfig, UcxTransport};
use crate::{
    Answer, Blocked, CallSig, KvStore, RecvInto, ReqId, Result, Tag, Transport, TransportError,
};

/// Settings of a [`Routed`] transport.
#[derive(Clone, Debug)]
pub struct RoutedConfig {
    pub rank: usize,
    pub world: usize,
    /// Unique per job; names shm segments and store keys.
    pub job_id: String,
    /// The job's transport key, which tcp connections prove on both ends.
    pub key: Key,
    /// Global ranks on this host, including this one. They talk over shm
    /// when `use_shm` is set; every other rank over tcp.
    pub local_ranks: Vec<usize>,
    pub use_shm: bool,
    /// Bytes per directed shm ring.
    pub ring_size: usize,
    /// Shm messages of at least this many bytes are read straight from the
    /// sender's memory (single copy); 0 streams everything through the rings.
    pub cma_threshold: usize,
    /// ... in calls of at least this many bytes (`ShmConfig::cma_min_call`).
    pub cma_min_call: usize,
    /// ... and split from this size (`ShmConfig::split_bytes`).
    pub split_bytes: usize,
    /// Bytes of each shm slot buffer (`ShmConfig::slot_size`).
    pub slot_size: usize,
    /// How shm waits spin (`ShmConfig::wait`).
    pub wait: WaitPolicy,
    /// Logical CPUs of this host's ranks (`ShmConfig::cpus`).
    pub cpus: usize,
    /// The flow-control window per peer, on every transport ([`crate::flow`]).
    pub unexpected_bytes: usize,
    /// Of it, how far collective messages to shm peers may run ahead
    /// (`ShmConfig::run_ahead`).
    pub shm_run_ahead: usize,
    /// Address tcp listens on and publishes.
    pub bind_ip: IpAddr,
    /// Limit for setup and for flushing on close.
    pub timeout: Duration,
    /// Congestion control of the tcp connections (`None`: the system's).
    pub tcp_congestion: Option<Congestion>,
    /// What carries the ranks not reached over shm.
    pub net: Net,
    /// The UCP library a UCX side loads.
    pub ucx_lib: String,
}

/// The transport for the ranks not reached over shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net {
    Tcp,
    Ucx,
}

impl RoutedConfig {
    pub fn new(
        rank: usize,
        world: usize,
        local_ranks: Vec<usize>,
        job_id: &str,
        key: Key,
    ) -> RoutedConfig {
        RoutedConfig {
            rank,
            world,
            job_id: job_id.to_string(),
            key,
            local_ranks,
            use_shm: true,
            ring_size: DEFAULT_RING_SIZE,
            cma_threshold: DEFAULT_CMA_THRESHOLD,
            cma_min_call: DEFAULT_CMA_MIN_CALL,
            split_bytes: crate::shm::DEFAULT_SPLIT_BYTES,
            slot_size: DEFAULT_SLOT_SIZE,
            wait: WaitPolicy::default(),
            cpus: crate::shm::process_cpus(),
            unexpected_bytes: crate::flow::DEFAULT_WINDOW,
            shm_run_ahead: DEFAULT_RUN_AHEAD,
            bind_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            timeout: Duration::from_secs(60),
            tcp_congestion: None,
            net: Net::Tcp,
            ucx_lib: crate::ucx::DEFAULT_LIB.to_string(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Shm = 0,
    /// tcp or UCX, whichever this transport has.
    Net = 1,
}

/// Routes each peer to shm or tcp; see the module docs.
pub struct Routed {
    rank: usize,
    world: usize,
    shm: Option<ShmTransport>,
    tcp: Option<TcpTransport>,
    ucx: Option<UcxTransport>,
    /// Side reaching each global rank (`None`: self or unreachable).
    route: Vec<Option<Via>>,
    bell: Doorbell,
    /// Which side `probe` asks first next (alternates).
    probe_turn: AtomicUsize,
}

impl Routed {
    /// Builds the shm side over the local ranks (when there are others and
    /// `use_shm` is set) and the tcp side over all remaining ranks.
    ///
    /// First every rank checks that the ranks of its host and rank 0 agree
    /// with it on the world size and (the ranks of its host) on the
    /// transport, so a disagreement fails at once with its cause named,
    /// before any segment or socket exists ([`crate::setup`]).
    pub fn connect(cfg: &RoutedConfig, store: &dyn KvStore) -> Result<Routed> {
        let mut locals: Vec<usize> = cfg
            .local_ranks
            .iter()
            .copied()
            .filter(|&r| r < cfg.world)
            .collect();
        if !locals.contains(&cfg.rank) {
            locals.push(cfg.rank);
        }
        let mine = SetupRecord {
            world: cfg.world,
            shm: cfg.use_shm,
            ucx: cfg.net == Net::Ucx,
        };
        let mut checked = locals.clone();
        if !checked.contains(&0) {
            checked.insert(0, 0);
        }
        agree(store, &cfg.job_id, cfg.rank, mine, &checked, &locals)?;
        let shm = if cfg.use_shm && locals.len() > 1 {
            let c = ShmConfig {
                rank: cfg.rank,
                world: cfg.world,
                local_ranks: locals.clone(),
                job_id: cfg.job_id.clone(),
                ring_size: cfg.ring_size,
                timeout: cfg.timeout,
                cma_threshold: cfg.cma_threshold,
                cma_min_call: cfg.cma_min_call,
                split_bytes: cfg.split_bytes,
                slot_size: cfg.slot_size,
                unexpected_bytes: cfg.unexpected_bytes,
                run_ahead: cfg.shm_run_ahead,
                wait: cfg.wait,
                cpus: cfg.cpus,
            };
            Some(ShmTransport::connect(&c, store)?)
        } else {
            None
        };
        let bell = shm.as_ref().map_or_else(Doorbell::new, |s| s.doorbell());
        let remote: Vec<usize> = (0..cfg.world)
            .filter(|&r| r != cfg.rank && (shm.is_none() || !locals.contains(&r)))
            .collect();
        if cfg.net == Net::Ucx && !remote.is_empty() {
            drop(bell);
            let mut c = UcxConfig::new(cfg.rank, cfg.world, remote, &cfg.job_id);
            c.local_ranks = locals;
            c.timeout = cfg.timeout;
            c.lib = cfg.ucx_lib.clone();
            c.unexpected_bytes = cfg.unexpected_bytes;
            let ucx = UcxTransport::connect(&c, store)?;
            let mut routed = Routed::new(cfg.rank, cfg.world, shm, None);
            routed.add_ucx(ucx);
            return Ok(routed);
        }
        let tcp = if remote.is_empty() {
            None
        } else {
            let mut c = TcpConfig::new(cfg.rank, cfg.world, remote, &cfg.job_id, cfg.key.clone());
            c.bind_ip = cfg.bind_ip;
            c.timeout = cfg.timeout;
            c.congestion = cfg.tcp_congestion.clone();
            c.unexpected_bytes = cfg.unexpected_bytes;
            Some(TcpTransport::connect_with_doorbell(
                &c,
                store,
                bell.clone(),
            )?)
        };
        drop(bell);
        Ok(Routed::new(cfg.rank, cfg.world, shm, tcp))
    }

    /// Routes to `ucx` every rank shm does not reach (there is no tcp side).
    pub fn add_ucx(&mut self, ucx: UcxTransport) {
        assert!(self.tcp.is_none(), "a Routed has one network side");
        for (p, via) in self.route.iter_mut().enumerate() {
            if via.is_none() && ucx.reaches(p) {
                *via = Some(Via::Net);
            }
        }
        self.ucx = Some(ucx);
    }

    /// Combines transports built elsewhere. For `wait` to wake promptly on
    /// both, the tcp side should ring the shm side's doorbell
    /// ([`TcpTransport::connect_with_doorbell`]); otherwise it notices tcp
    /// activity within the doorbell's nap (20 ms).
    pub fn new(
        rank: usize,
        world: usize,
        shm: Option<ShmTransport>,
        tcp: Option<TcpTransport>,
    ) -> Routed {
        let bell = match (&shm, &tcp) {
            (Some(s), _) => s.doorbell(),
            (None, Some(t)) => t.doorbell(),
            (None, None) => Doorbell::new(),
        };
        let route = (0..world)
            .map(|p| match (&shm, &tcp) {
                _ if p == rank => None,
                (Some(s), _) if s.reaches(p) => Some(Via::Shm),
                (_, Some(_)) => Some(Via::Net),
                _ => None,
            })
            .collect();
        Routed {
            rank,
            world,
            shm,
            tcp,
            ucx: None,
            route,
            bell,
            probe_turn: AtomicUsize::new(0),
        }
    }

    /// The network side: tcp or UCX.
    fn net(&self) -> Option<&dyn Transport> {
        match (&self.tcp, &self.ucx) {
            (Some(t), _) => Some(t),
            (None, Some(u)) => Some(u),
            (None, None) => None,
        }
    }

    /// Which side reaches `peer`: local ranks through shm when it exists.
    fn via(&self, peer: usize) -> Result<(Via, &dyn Transport)> {
        let t = |via: Via| -> Option<&dyn Transport> {
            match via {
                Via::Shm => self.shm.as_ref().map(|s| s as &dyn Transport),
                Via::Net => self.net(),
            }
        };
        match self.route.get(peer).copied().flatten() {
            Some(via) => Ok((via, t(via).unwrap())),
            None => Err(TransportError::Io(format!(
                "rank {peer} is not reachable from rank {}",
                self.rank
            ))),
        }
    }

    fn side(&self, req: ReqId) -> Result<&dyn Transport> {
        let t: Option<&dyn Transport> = if req & 1 == 0 {
            self.shm.as_ref().map(|s| s as &dyn Transport)
        } else {
            self.net()
        };
        t.ok_or_else(|| TransportError::Io(format!("unknown request {req}")))
    }

    /// Whether large messages to `peer` are read once by cross-memory
    /// attach (a shm peer the kernel lets read this process's memory).
    pub fn uses_cma(&self, peer: usize) -> bool {
        self.shm.as_ref().is_some_and(|s| s.uses_cma(peer))
    }

    /// Closes both sides, saying bye to every peer.
    pub fn close(&self) {
        if let Some(s) = &self.shm {
            s.close();
        }
        if let Some(t) = &self.tcp {
            t.close();
        }
        if let Some(u) = &self.ucx {
            u.close();
        }
    }

    /// The UCX version, when a UCX side exists.
    pub fn ucx_version(&self) -> Option<(u32, u32, u32)> {
        self.ucx.as_ref().map(|u| u.version())
    }
}

fn wrap(via: Via, id: ReqId) -> ReqId {
    (id << 1) | via as u64
}

impl Transport for Routed {
    fn shared(&self) -> Option<&dyn crate::SharedWindow> {
        self.shm.as_ref().and_then(|s| s.shared())
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.world
    }

    unsafe fn isend(
        &self,
        peer: usize,
        tag: Tag,
        sig: CallSig,
        data: *const u8,
        len: usize,
        call_bytes: usize,
    ) -> Result<ReqId> {
        let (via, t) = self.via(peer)?;
        Ok(wrap(via, t.isend(peer, tag, sig, data, len, call_bytes)?))
    }

    unsafe fn irecv(&self, peer: usize, tag: Tag, sig: CallSig, into: RecvInto) -> Result<ReqId> {
        let (via, t) = self.via(peer)?;
        Ok(wrap(via, t.irecv(peer, tag, sig, into)?))
    }

    fn test(&self, req: ReqId) -> Result<bool> {
        self.side(req)?.test(req >> 1)
    }

    /// Each side probes the peers it reaches; when both have a message, the
    /// side asked first alternates (arrival order is only known per side).
    fn probe(&self, from: &[(usize, Tag)]) -> Result<Option<usize>> {
        let mut sides: [Vec<(usize, Tag)>; 2] = [Vec::new(), Vec::new()];
        for &(peer, tag) in from {
            let (via, _) = self.via(peer)?;
            sides[via as usize].push((peer, tag));
        }
        let turn = self.probe_turn.fetch_add(1, Ordering::Relaxed) % 2;
        for i in [turn, 1 - turn] {
            let peers = &sides[i];
            if peers.is_empty() {
                continue;
            }
            let (_, t) = self.via(peers[0].0)?;
            if let Some(peer) = t.probe(peers)? {
                return Ok(Some(peer));
            }
        }
        Ok(None)
    }

    fn progress(&self) -> Result<bool> {
        let mut changed = false;
        if let Some(s) = &self.shm {
            changed |= s.progress()?;
        }
        if let Some(t) = self.net() {
            changed |= t.progress()?;
        }
        Ok(changed)
    }

    fn wait(&self, timeout: Duration) -> Result<()> {
        if let Some(u) = &self.ucx {
            if self.shm.is_none() {
                // UCX alone: it sleeps on its worker's event fd.
                return u.wait(timeout);
            }
            return wait_busy(&self.bell, timeout, || self.progress(), || u.busy());
        }
        wait_on(&self.bell, timeout, || self.progress())
    }

    fn abort(&self, reason: &str) {
        if let Some(s) = &self.shm {
            s.abort(reason);
        }
        if let Some(t) = self.net() {
            t.abort(reason);
        }
    }

    fn finish_call(&self, comm: u32, seq: u32, sig: CallSig) -> Result<()> {
        let shm = self.shm.as_ref().map(|s| s.finish_call(comm, seq, sig));
        let tcp = self.net().map(|t| t.finish_call(comm, seq, sig));
        shm.unwrap_or(Ok(())).and(tcp.unwrap_or(Ok(())))
    }

    fn set_blocked(&self, b: &Blocked) {
        // (each side tells the ranks it reaches)
        if let Some(s) = &self.shm {
            s.set_blocked(b);
        }
        if let Some(t) = self.net() {
            t.set_blocked(b);
        }
    }

    fn ask(&self, peer: usize) -> Result<()> {
        self.via(peer)?.1.ask(peer)
    }

    fn answer(&self, peer: usize) -> Option<Answer> {
        self.via(peer).ok()?.1.answer(peer)
    }
}
