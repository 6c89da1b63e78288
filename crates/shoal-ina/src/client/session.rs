//! Job setup: rank 0 authenticates to every switch of every tree, admits
//! the job there with a fresh packet key per admission, and publishes what
//! each rank needs through the store; the other ranks read it. What is
//! published is public (switch job ids, nonces): each rank derives the
//! packet keys from its own job key and the nonces, so the store never
//! holds a secret. Failures are published too, so every rank returns the
//! same error and falls back together.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use shoal_bootstrap::auth::{random_bytes, to_hex};
use shoal_bootstrap::KvStore;

use crate::control::{handshake, read_msg, write_msg, AdmitOk, AdmitReq, CtrlMsg, ErrCode, Uplink};
use crate::mac::PacketKey;
use crate::InaError;

use super::{InaConfig, InaKeys, TreeSpec};

/// What one rank needs to use one tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeParams {
    pub tree: u16,
    /// The switch this rank sends to (the root, or its leaf).
    pub data: SocketAddr,
    pub job: u32,
    /// Tags this rank's packets and checks the results' tags.
    pub key: PacketKey,
    pub member: u16,
    /// Slot-pool size of that switch: `seq % slots` is the slot.
    pub slots: u16,
    /// Window limit: the smallest pool along the tree.
    pub limit: u16,
    pub cwnd_cap: u16,
    pub budget: usize,
    /// Workers summed by this tree (int32 headroom).
    pub workers: usize,
}

/// A control connection that leases an admitted job.
pub struct Lease {
    pub stream: TcpStream,
    pub job: u32,
}

/// Bytes of an admission's nonce (published; the packet key derives from it).
const NONCE_BYTES: usize = 16;

/// One attachment point of a tree as published: a switch and its ranks.
struct Attach {
    ok: AdmitOk,
    data: SocketAddr,
    nonce: [u8; NONCE_BYTES],
    ranks: Vec<usize>,
}

fn params_key(cfg: &InaConfig) -> String {
    format!("{}params", cfg.key_prefix)
}

/// Runs on every rank; returns this rank's parameters per tree, and (on
/// rank 0) the leases to keep.
pub fn establish(
    cfg: &InaConfig,
    store: &dyn KvStore,
) -> Result<(Vec<TreeParams>, Vec<Lease>), InaError> {
    let key = params_key(cfg);
    let io = |e: std::io::Error| InaError::Protocol(format!("store: {e}"));
    let (text, leases) = if cfg.rank == 0 {
        match admit_all(cfg) {
            Ok((text, leases)) => {
                store.set(&key, text.as_bytes()).map_err(io)?;
                (text, leases)
            }
            Err(e) => {
                store.set(&key, encode_error(&e).as_bytes()).map_err(io)?;
                return Err(e);
            }
        }
    } else {
        let v = store.get(&key).map_err(io)?;
        (String::from_utf8_lossy(&v).into_owned(), Vec::new())
    };
    Ok((parse_params(&text, cfg.rank, &cfg.keys)?, leases))
}

fn admit_all(cfg: &InaConfig) -> Result<(String, Vec<Lease>), InaError> {
    let mut text = String::new();
    let mut leases = Vec::new();
    for (t, spec) in cfg.trees.iter().enumerate() {
        let attaches = admit_tree(cfg, t as u16, spec, &mut leases)?;
        let limit = attaches.iter().map(|a| a.ok.slots).min().unwrap_or(1);
        let cap = attaches.iter().map(|a| a.ok.cwnd_cap).min().unwrap_or(1);
        let budget = attaches
            .iter()
            .map(|a| a.ok.payload_budget)
            .min()
            .unwrap_or(0);
        for a in &attaches {
            let ranks: Vec<String> = a.ranks.iter().map(|r| r.to_string()).collect();
            let _ = writeln!(
                text,
                "tree={t} data={} job={} nonce={} slots={} limit={limit} cap={cap} budget={} workers={} ranks={}",
                a.data, a.ok.job, to_hex(&a.nonce), a.ok.slots, budget.min(cfg.payload_budget as u16),
                cfg.world, ranks.join(",")
            );
        }
    }
    Ok((text, leases))
}

fn admit_tree(
    cfg: &InaConfig,
    tree: u16,
    spec: &TreeSpec,
    leases: &mut Vec<Lease>,
) -> Result<Vec<Attach>, InaError> {
    if spec.leaves.is_empty() {
        let all: Vec<usize> = (0..cfg.world).collect();
        let a = admit_one(cfg, spec.root, tree, all.len(), None, leases)?;
        return Ok(vec![Attach { ranks: all, ..a }]);
    }
    check_partition(cfg.world, spec)?;
    let root = admit_one(cfg, spec.root, tree, spec.leaves.len(), None, leases)?;
    let mut out = Vec::new();
    for (i, leaf) in spec.leaves.iter().enumerate() {
        let up = Uplink {
            job: root.ok.job,
            tree,
            member: i as u16,
            slots: root.ok.slots,
            key: PacketKey::derive(&cfg.keys.job, &root.nonce),
            port: root.ok.data_port,
        };
        let a = admit_one(cfg, leaf.control, tree, leaf.ranks.len(), Some(up), leases)?;
        out.push(Attach {
            ranks: leaf.ranks.clone(),
            ..a
        });
    }
    // The root serves no rank directly but bounds the tree's window and payload.
    out.push(Attach {
        ranks: Vec::new(),
        ..root
    });
    Ok(out)
}

fn check_partition(world: usize, spec: &TreeSpec) -> Result<(), InaError> {
    let mut seen = vec![false; world];
    for r in spec.leaves.iter().flat_map(|l| &l.ranks) {
        if *r >= world || std::mem::replace(&mut seen[*r], true) {
            return Err(InaError::Protocol(format!(
                "rank {r} listed twice or out of range"
            )));
        }
    }
    if seen.iter().any(|s| !s) {
        return Err(InaError::Protocol("leaves do not cover every rank".into()));
    }
    Ok(())
}

fn admit_one(
    cfg: &InaConfig,
    control: SocketAddr,
    tree: u16,
    members: usize,
    uplink: Option<Uplink>,
    leases: &mut Vec<Lease>,
) -> Result<Attach, InaError> {
    let partial_min = cfg
        .partial
        .map(|p| ((p.fraction * members as f64).ceil() as usize).clamp(1, members) as u16)
        .unwrap_or(0);
    let nonce = random_bytes::<NONCE_BYTES>()
        .map_err(|e| InaError::Protocol(format!("cannot draw a nonce: {e}")))?;
    let mut req = AdmitReq {
        tree,
        members: members.min(u16::MAX as usize) as u16,
        slots: cfg.max_slots,
        wire_mask: cfg.wire_mask(),
        partial_min,
        deadline_us: cfg
            .partial
            .and_then(|p| p.deadline)
            .map(|d| d.as_micros().min(u32::MAX as u128) as u32)
            .unwrap_or(0),
        key: PacketKey::derive(&cfg.keys.job, &nonce),
        uplink,
    };
    let mut stream = TcpStream::connect_timeout(&control, cfg.connect_timeout)
        .map_err(|e| InaError::Unreachable(format!("{control}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let deadline = Instant::now() + cfg.connect_timeout;
    let mut session = handshake::client(&mut stream, &cfg.keys.switch, deadline)
        .map_err(|e| at_switch(control, e))?;
    session.crypt_admit(&mut req);
    let ok = match request(&mut stream, &CtrlMsg::Admit(req), cfg.connect_timeout)? {
        CtrlMsg::AdmitOk(ok) => ok,
        other => return Err(reply_error(other)),
    };
    leases.push(Lease {
        stream,
        job: ok.job,
    });
    Ok(Attach {
        ok,
        data: SocketAddr::new(control.ip(), ok.data_port),
        nonce,
        ranks: Vec::new(),
    })
}

/// Names the switch in an authentication error (there may be several).
fn at_switch(control: SocketAddr, e: InaError) -> InaError {
    match e {
        InaError::Unauthenticated(r) => InaError::Unauthenticated(format!("{control}: {r}")),
        other => other,
    }
}

/// One request/reply exchange on a control connection.
pub fn request(
    stream: &mut TcpStream,
    msg: &CtrlMsg,
    timeout: Duration,
) -> Result<CtrlMsg, InaError> {
    let lost = |e: std::io::Error| InaError::Unreachable(format!("control channel: {e}"));
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_nodelay(true);
    write_msg(stream, msg).map_err(lost)?;
    read_msg(stream).map_err(lost)
}

fn reply_error(msg: CtrlMsg) -> InaError {
    match msg {
        CtrlMsg::Error {
            code: ErrCode::Full,
            reason,
        } => InaError::Full(reason),
        CtrlMsg::Error {
            code: ErrCode::Refused,
            reason,
        } => InaError::Refused(reason),
        CtrlMsg::Error {
            code: ErrCode::Busy,
            reason,
        } => InaError::Full(reason),
        CtrlMsg::Error { reason, .. } => InaError::Protocol(reason),
        other => InaError::Protocol(format!("unexpected reply {other:?}")),
    }
}

fn encode_error(e: &InaError) -> String {
    let (kind, r) = match e {
        InaError::Unreachable(r) => ("unreachable", r),
        InaError::Full(r) => ("full", r),
        InaError::Refused(r) => ("refused", r),
        InaError::SwitchDied(r) => ("died", r),
        InaError::Unauthenticated(r) => ("unauthenticated", r),
        InaError::Protocol(r) | InaError::PeerFailed(r) | InaError::Config(r) => ("protocol", r),
    };
    format!("error={kind} {r}")
}

fn parse_params(text: &str, rank: usize, keys: &InaKeys) -> Result<Vec<TreeParams>, InaError> {
    if let Some(rest) = text.strip_prefix("error=") {
        let (kind, r) = rest.split_once(' ').unwrap_or((rest, ""));
        let r = format!("(from rank 0) {r}");
        return Err(match kind {
            "unreachable" => InaError::Unreachable(r),
            "full" => InaError::Full(r),
            "refused" => InaError::Refused(r),
            "died" => InaError::SwitchDied(r),
            "unauthenticated" => InaError::Unauthenticated(r),
            _ => InaError::Protocol(r),
        });
    }
    let bad = |l: &str| InaError::Protocol(format!("bad job parameters line {l:?}"));
    let mut out = Vec::new();
    for line in text.lines() {
        let kv: Vec<(&str, &str)> = line.split(' ').filter_map(|f| f.split_once('=')).collect();
        let get = |k: &str| {
            kv.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| *v)
                .ok_or_else(|| bad(line))
        };
        let ranks = get("ranks")?;
        let Some(member) = ranks.split(',').position(|r| r == rank.to_string()) else {
            continue;
        };
        let num = |k: &str| get(k)?.parse::<u64>().map_err(|_| bad(line));
        out.push(TreeParams {
            tree: num("tree")? as u16,
            data: get("data")?.parse().map_err(|_| bad(line))?,
            job: num("job")? as u32,
            key: PacketKey::derive(
                &keys.job,
                &from_hex(get("nonce")?).ok_or_else(|| bad(line))?,
            ),
            member: member as u16,
            slots: num("slots")? as u16,
            limit: num("limit")? as u16,
            cwnd_cap: num("cap")? as u16,
            budget: num("budget")? as usize,
            workers: num("workers")? as usize,
        });
    }
    if out.is_empty() {
        return Err(InaError::Protocol(format!(
            "rank {rank} is in no aggregation tree"
        )));
    }
    Ok(out)
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
