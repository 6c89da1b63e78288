//! Rendezvous: who is this process (rank, world, local rank), where is the
//! store every rank meets at, and which ranks share a host.
//!
//! Sources, first match wins:
//!
//! 1. explicit arguments (`rank`, `world_size`, `addr`);
//! 2. the torchrun / `shoal run` convention: `RANK`, `WORLD_SIZE`,
//!    `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`;
//! 3. Slurm (`srun`): `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, tasks
//!    per node from `SLURM_NTASKS_PER_NODE` or `SLURM_STEP_TASKS_PER_NODE` /
//!    `SLURM_TASKS_PER_NODE` (`2(x3),1`) with `SLURM_NODEID`; the master is
//!    `MASTER_ADDR` or the first host of the step's / job's node list;
//! 4. OpenMPI (`mpirun`): `OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}`;
//! 5. nothing: a single process, rank 0 of 1.
//!
//! The store is, in order: `SHOAL_STORE_PATH` (a directory, [`FileStore`]),
//! `SHOAL_STORE_ADDR` (`host:port` of a running `TcpStoreServer`), or a
//! [`TcpStoreServer`] that rank 0 starts on the master address
//! ([`store_bind_addrs`]). TCP connections prove the job secret
//! ([`JobSecret`]). `MASTER_PORT`
//! defaults to 29500; under Slurm to a port derived from the job id, so jobs
//! sharing a first node do not collide. Under a torchrun agent that already
//! serves torch's own store on `MASTER_PORT` (`TORCHELASTIC_USE_AGENT_STORE`),
//! shoal's store uses `MASTER_PORT + 1`.
//!
//! Every key is scoped by a job id ([`job_id`]) and a generation, so several
//! jobs, or several initialisations of one job, can share a store. Rank 0
//! opens each generation (a counter only it adds to, and an "open" key that
//! names the generation while it gathers); the other ranks join whichever is
//! open. Rank 0 closes it before publishing the host list, and a newer rank
//! 0 marks an unfinished older one superseded, so neither a re-init nor a
//! crashed launch leaves ranks in the wrong generation (docs/architecture.md,
//! "Rendezvous").
//!
//! The environment is read through an injected accessor so tests are hermetic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use shoal_transport::KvStore;

use crate::secret::JobSecret;
use crate::store::{
    is_disconnect, FileStore, ScopedStore, Store, StoreLimits, TcpStore, TcpStoreServer,
    DEFAULT_MAX_VALUE,
};

/// Reads an environment variable; injected so tests need not touch the process env.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `MASTER_PORT` when none is given (torch's default).
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// Values passed by the caller (e.g. `shoal.init(rank=..., world_size=..., addr=...)`);
/// they override the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Explicit {
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    /// `host:port` of the master: rank 0 serves the store there.
    pub addr: Option<String>,
}

/// Who this process is and where its store lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    pub rank: usize,
    pub world_size: usize,
    pub local_rank: Option<usize>,
    pub local_world_size: Option<usize>,
    /// Host where rank 0 serves the store (unless an external store is set).
    pub master_addr: Option<String>,
    pub master_port: Option<u16>,
    /// `SHOAL_STORE_ADDR`: a standalone store server; overrides the master.
    pub store_addr: Option<String>,
    /// `SHOAL_STORE_PATH`: a shared directory used as a [`FileStore`]; overrides both.
    pub store_path: Option<PathBuf>,
    /// Where rank and world came from: "explicit", "shoal", "torchrun", "slurm",
    /// "openmpi" or "default".
    pub source: &'static str,
}

/// Rank, world and local layout as one launcher convention reports them,
/// plus where that convention puts the master by default.
struct Found {
    source: &'static str,
    rank: usize,
    world: usize,
    local_rank: Option<usize>,
    local_world: Option<usize>,
    default_master: Option<String>,
    default_port: u16,
}

/// Resolves this process's identity: explicit values win, then the
/// launchers' environment conventions in the order of the module docs.
/// Invalid or inconsistent values are errors naming the variable and value.
pub fn detect(explicit: &Explicit, env: Env) -> Result<ProcessInfo, String> {
    let found = match from_explicit(explicit)? {
        Some(f) => f,
        None => match from_torchrun(env)? {
            Some(f) => f,
            None => match from_slurm(env)? {
                Some(f) => f,
                None => from_openmpi(env)?.unwrap_or_else(single_process),
            },
        },
    };
    let (master_addr, master_port) = resolve_master(explicit, &found, env)?;
    let info = ProcessInfo {
        rank: found.rank,
        world_size: found.world,
        local_rank: found.local_rank,
        local_world_size: found.local_world,
        master_addr,
        master_port,
        store_addr: store_addr(env)?,
        store_path: nonempty(env, "SHOAL_STORE_PATH").map(PathBuf::from),
        source: found.source,
    };
    require_store(&info)?;
    Ok(info)
}

/// [`detect`] on the process's real environment.
pub fn detect_from_process_env(explicit: &Explicit) -> Result<ProcessInfo, String> {
    detect(explicit, &|k| std::env::var(k).ok())
}

fn nonempty(env: Env, var: &str) -> Option<String> {
    env(var)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Parses an optional non-negative integer variable.
fn num(env: Env, var: &str) -> Result<Option<usize>, String> {
    nonempty(env, var)
        .map(|v| {
            v.parse()
                .map_err(|_| format!("{var}={v:?} is not a non-negative integer"))
        })
        .transpose()
}

/// Parses a variable that must be present once its convention is in use.
fn required(env: Env, var: &str, because: &str) -> Result<usize, String> {
    num(env, var)?.ok_or_else(|| format!("{because} is set but {var} is not"))
}

/// Checks `rank < world` and `world >= 1`, naming the variables on failure.
fn check_rank(rank_var: &str, rank: usize, world_var: &str, world: usize) -> Result<(), String> {
    if world == 0 {
        return Err(format!(
            "{world_var}=\"0\": the world size must be at least 1"
        ));
    }
    if rank >= world {
        return Err(format!(
            "{rank_var}=\"{rank}\" is not below {world_var}=\"{world}\""
        ));
    }
    Ok(())
}

/// Names of the four variables of one convention, for error messages.
struct Vars {
    rank: &'static str,
    world: &'static str,
    local_rank: &'static str,
    local_world: &'static str,
}

/// Validates a convention's values and packs them into a [`Found`].
fn found(
    source: &'static str,
    vars: &Vars,
    (rank, world): (usize, usize),
    (local_rank, local_world): (Option<usize>, Option<usize>),
) -> Result<Found, String> {
    check_rank(vars.rank, rank, vars.world, world)?;
    if let Some(lw) = local_world {
        if lw > world {
            return Err(format!(
                "{}=\"{lw}\" exceeds {}=\"{world}\"",
                vars.local_world, vars.world
            ));
        }
        if let Some(lr) = local_rank {
            check_rank(vars.local_rank, lr, vars.local_world, lw)?;
        }
    }
    Ok(Found {
        source,
        rank,
        world,
        local_rank,
        local_world,
        default_master: None,
        default_port: DEFAULT_MASTER_PORT,
    })
}

fn from_explicit(e: &Explicit) -> Result<Option<Found>, String> {
    let (rank, world) = match (e.rank, e.world_size) {
        (None, None) => return Ok(None),
        (Some(r), Some(w)) => (r, w),
        (r, w) => {
            return Err(format!(
                "explicit rank and world_size must be given together (got rank={r:?}, world_size={w:?})"
            ))
        }
    };
    let vars = Vars {
        rank: "rank",
        world: "world_size",
        local_rank: "",
        local_world: "",
    };
    found("explicit", &vars, (rank, world), (None, None)).map(Some)
}

fn from_torchrun(env: Env) -> Result<Option<Found>, String> {
    let (rank, world) = match (num(env, "RANK")?, num(env, "WORLD_SIZE")?) {
        (None, None) => return Ok(None),
        (Some(r), Some(w)) => (r, w),
        (Some(_), None) => return Err("RANK is set but WORLD_SIZE is not".into()),
        (None, Some(_)) => return Err("WORLD_SIZE is set but RANK is not".into()),
    };
    let source = if env("SHOAL_JOB_ID").is_some() && env("TORCHELASTIC_RUN_ID").is_none() {
        "shoal"
    } else {
        "torchrun"
    };
    let vars = Vars {
        rank: "RANK",
        world: "WORLD_SIZE",
        local_rank: "LOCAL_RANK",
        local_world: "LOCAL_WORLD_SIZE",
    };
    let local = (num(env, "LOCAL_RANK")?, num(env, "LOCAL_WORLD_SIZE")?);
    found(source, &vars, (rank, world), local).map(Some)
}

fn from_slurm(env: Env) -> Result<Option<Found>, String> {
    // SLURM_PROCID is set by srun only; inside a bare salloc shell it is
    // absent, and that shell is a single process, not a task of a job step.
    let Some(rank) = num(env, "SLURM_PROCID")? else {
        return Ok(None);
    };
    let world = match num(env, "SLURM_NTASKS")? {
        Some(w) => w,
        None => num(env, "SLURM_NPROCS")?
            .ok_or("SLURM_PROCID is set but neither SLURM_NTASKS nor SLURM_NPROCS is")?,
    };
    let vars = Vars {
        rank: "SLURM_PROCID",
        world: "SLURM_NTASKS",
        local_rank: "SLURM_LOCALID",
        local_world: "SLURM_NTASKS_PER_NODE",
    };
    let local = (num(env, "SLURM_LOCALID")?, slurm_local_world(env)?);
    let mut f = found("slurm", &vars, (rank, world), local)?;
    f.default_master = slurm_first_host(env)?;
    f.default_port = match num(env, "SLURM_JOB_ID")? {
        Some(job) => slurm_port(job),
        None => DEFAULT_MASTER_PORT,
    };
    Ok(Some(f))
}

/// A master port derived from the Slurm job id, in 20000..30000, so that two
/// jobs whose first node is the same pick different ports.
fn slurm_port(job_id: usize) -> u16 {
    20000 + (job_id % 10000) as u16
}

/// Tasks on this node: `SLURM_NTASKS_PER_NODE` when given, else this node's
/// entry (`SLURM_NODEID`) of the step's or job's tasks-per-node list.
fn slurm_local_world(env: Env) -> Result<Option<usize>, String> {
    if let Some(n) = num(env, "SLURM_NTASKS_PER_NODE")? {
        return Ok(Some(n));
    }
    for var in ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"] {
        if let Some(list) = nonempty(env, var) {
            let counts = parse_tasks_per_node(&list)
                .map_err(|why| format!("{var}={list:?} is not a tasks-per-node list: {why}"))?;
            return pick_node_count(env, var, &counts);
        }
    }
    Ok(None)
}

/// This node's task count from a per-node list: indexed by `SLURM_NODEID`,
/// or the common value when every node runs the same number.
fn pick_node_count(env: Env, var: &str, counts: &[usize]) -> Result<Option<usize>, String> {
    match num(env, "SLURM_NODEID")? {
        Some(node) => counts.get(node).copied().map(Some).ok_or_else(|| {
            format!(
                "SLURM_NODEID=\"{node}\" is beyond the {} nodes of {var}",
                counts.len()
            )
        }),
        None if counts.windows(2).all(|w| w[0] == w[1]) => Ok(counts.first().copied()),
        None => Ok(None),
    }
}

/// Expands Slurm's tasks-per-node syntax: `"2(x3),1"` -> `[2, 2, 2, 1]`.
pub fn parse_tasks_per_node(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let (count, times) = match part.split_once("(x") {
            Some((c, rest)) => {
                let t = rest
                    .strip_suffix(')')
                    .ok_or_else(|| format!("unclosed '(' in {part:?}"))?;
                (
                    c,
                    t.parse::<usize>()
                        .map_err(|_| format!("bad repeat count in {part:?}"))?,
                )
            }
            None => (part, 1),
        };
        let count = count
            .parse::<usize>()
            .map_err(|_| format!("bad task count {count:?}"))?;
        out.extend(std::iter::repeat_n(count, times));
    }
    Ok(out)
}

/// The first host of the step's node list (where srun puts rank 0), else of
/// the job's.
fn slurm_first_host(env: Env) -> Result<Option<String>, String> {
    for var in [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ] {
        if let Some(list) = nonempty(env, var) {
            let hosts = expand_nodelist(&list)
                .map_err(|why| format!("{var}={list:?} is not a node list: {why}"))?;
            return Ok(hosts.into_iter().next());
        }
    }
    Ok(None)
}

/// Expands a Slurm host list: `"node[01-03,07],gpu1"` ->
/// `node01 node02 node03 node07 gpu1`. Zero padding follows the range's
/// lower bound; several bracket groups in one name are expanded too.
pub fn expand_nodelist(s: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for name in split_top_level(s)? {
        hosts.extend(expand_name(name)?);
    }
    Ok(hosts)
}

/// Splits at commas that are not inside brackets.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced or nested brackets".into());
        }
    }
    if depth != 0 {
        return Err("unclosed '['".into());
    }
    parts.push(&s[start..]);
    Ok(parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect())
}

/// Expands one host name with zero or more bracket groups.
fn expand_name(name: &str) -> Result<Vec<String>, String> {
    let Some(open) = name.find('[') else {
        return Ok(vec![name.to_string()]);
    };
    let close = open + name[open..].find(']').ok_or("unclosed '['")?;
    let (prefix, ranges, rest) = (&name[..open], &name[open + 1..close], &name[close + 1..]);
    let tails = expand_name(rest)?;
    let mut out = Vec::new();
    for item in ranges.split(',') {
        for n in expand_range(item.trim())? {
            out.extend(tails.iter().map(|t| format!("{prefix}{n}{t}")));
        }
    }
    Ok(out)
}

/// `"01-03"` -> `["01", "02", "03"]`; `"7"` -> `["7"]`.
fn expand_range(item: &str) -> Result<Vec<String>, String> {
    let bad = || format!("bad range {item:?}");
    let (lo, hi) = item.split_once('-').unwrap_or((item, item));
    let width = lo.len();
    let lo_n: u64 = lo.parse().map_err(|_| bad())?;
    let hi_n: u64 = hi.parse().map_err(|_| bad())?;
    if hi_n < lo_n || hi_n - lo_n > 100_000 {
        return Err(bad());
    }
    Ok((lo_n..=hi_n).map(|n| format!("{n:0width$}")).collect())
}

fn from_openmpi(env: Env) -> Result<Option<Found>, String> {
    let Some(rank) = num(env, "OMPI_COMM_WORLD_RANK")? else {
        return Ok(None);
    };
    let world = required(env, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")?;
    let vars = Vars {
        rank: "OMPI_COMM_WORLD_RANK",
        world: "OMPI_COMM_WORLD_SIZE",
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        local_world: "OMPI_COMM_WORLD_LOCAL_SIZE",
    };
    let local = (
        num(env, "OMPI_COMM_WORLD_LOCAL_RANK")?,
        num(env, "OMPI_COMM_WORLD_LOCAL_SIZE")?,
    );
    found("openmpi", &vars, (rank, world), local).map(Some)
}

fn single_process() -> Found {
    Found {
        source: "default",
        rank: 0,
        world: 1,
        local_rank: Some(0),
        local_world: Some(1),
        default_master: None,
        default_port: DEFAULT_MASTER_PORT,
    }
}

/// Master address and port: explicit `addr`, else `MASTER_ADDR` /
/// `MASTER_PORT`, else the convention's defaults.
fn resolve_master(
    explicit: &Explicit,
    found: &Found,
    env: Env,
) -> Result<(Option<String>, Option<u16>), String> {
    if let Some(addr) = &explicit.addr {
        let (host, port) = split_host_port(addr).map_err(|why| format!("addr={addr:?} {why}"))?;
        return Ok((Some(host), Some(port)));
    }
    let host = nonempty(env, "MASTER_ADDR").or_else(|| found.default_master.clone());
    let port = match nonempty(env, "MASTER_PORT") {
        Some(p) => parse_port(&p).map_err(|why| format!("MASTER_PORT={p:?} {why}"))?,
        None => found.default_port,
    };
    let port = if truthy(env, "TORCHELASTIC_USE_AGENT_STORE") {
        // torchrun's agent already serves torch's store on MASTER_PORT.
        port.checked_add(1)
            .ok_or("MASTER_PORT=65535 leaves no port for shoal's store")?
    } else {
        port
    };
    let port = host.as_ref().map(|_| port);
    Ok((host, port))
}

fn truthy(env: Env, var: &str) -> bool {
    matches!(
        nonempty(env, var)
            .map(|v| v.to_ascii_lowercase())
            .as_deref(),
        Some("1" | "true" | "yes")
    )
}

fn parse_port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("is not a port number (1-65535)".into()),
    }
}

/// Splits `host:port` (also `[v6addr]:port`) into its parts.
pub fn split_host_port(addr: &str) -> Result<(String, u16), String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or("is not of the form host:port")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("has an empty host".into());
    }
    Ok((host.to_string(), parse_port(port)?))
}

fn store_addr(env: Env) -> Result<Option<String>, String> {
    let Some(addr) = nonempty(env, "SHOAL_STORE_ADDR") else {
        return Ok(None);
    };
    split_host_port(&addr).map_err(|why| format!("SHOAL_STORE_ADDR={addr:?} {why}"))?;
    Ok(Some(addr))
}

/// Several processes need somewhere to meet.
fn require_store(info: &ProcessInfo) -> Result<(), String> {
    let has_store =
        info.master_addr.is_some() || info.store_addr.is_some() || info.store_path.is_some();
    if info.world_size > 1 && !has_store {
        return Err(format!(
            "rank {} of {} ({}) has no store to meet the other ranks at: set MASTER_ADDR and \
             MASTER_PORT (rank 0 serves the store), SHOAL_STORE_ADDR, or SHOAL_STORE_PATH",
            info.rank, info.world_size, info.source
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Connecting

/// Rank 0's store accepts one connection per rank and this many more (a
/// rank reconnecting after an error before the server has noticed the old
/// connection close).
const CONNECTION_MARGIN: usize = 64;

/// What the store allows its clients: `SHOAL_STORE_MAX_VALUE` (default
/// [`DEFAULT_MAX_VALUE`]) and 64 connections beyond one per rank.
pub fn store_limits(env: Env, world: usize) -> Result<StoreLimits, String> {
    let max_value = match nonempty(env, "SHOAL_STORE_MAX_VALUE") {
        None => DEFAULT_MAX_VALUE,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "SHOAL_STORE_MAX_VALUE={v:?} is not a positive number of bytes"
                ))
            }
        },
    };
    Ok(StoreLimits {
        max_value,
        max_connections: world.saturating_add(CONNECTION_MARGIN),
    })
}

/// The job secret ([`JobSecret::load`]); a process that is the whole job
/// and meets no external store draws a fresh one that nothing else needs.
pub fn job_secret(info: &ProcessInfo, env: Env) -> Result<JobSecret, String> {
    if info.world_size == 1 && info.store_addr.is_none() {
        JobSecret::ephemeral()
    } else {
        JobSecret::load(env)
    }
}

/// Opens the store for `info`. With an external store (`SHOAL_STORE_PATH`,
/// `SHOAL_STORE_ADDR`) everyone is a client. Otherwise rank 0 starts a
/// [`TcpStoreServer`] at the master address ([`store_bind_addrs`]) and every
/// rank, rank 0 included, connects to it. A single process without a master
/// uses a private loopback server on an ephemeral port. Every TCP connection
/// proves `secret`. The server must be kept alive until every rank is done
/// with the store.
pub fn connect_store(
    info: &ProcessInfo,
    secret: &JobSecret,
    limits: &StoreLimits,
    timeout: Duration,
) -> Result<(Store, Option<TcpStoreServer>), String> {
    if let Some(dir) = &info.store_path {
        let s = FileStore::new(dir, timeout).map_err(|e| format!("SHOAL_STORE_PATH: {e}"))?;
        return Ok((Store::File(s), None));
    }
    let client = |addr: &str, what: &str| {
        TcpStore::connect(addr, secret, limits, timeout)
            .map_err(|e| format!("store of {what}: {e}"))
    };
    if let Some(addr) = &info.store_addr {
        let store = client(addr, "SHOAL_STORE_ADDR")?.served_by("the store server");
        return Ok((Store::Tcp(store), None));
    }
    match (&info.master_addr, info.master_port) {
        (Some(host), Some(port)) if info.world_size > 1 => {
            if info.rank == 0 {
                let served = store_bind_addrs(host, port).and_then(|binds| {
                    let server = start_server(&binds, secret, limits)?;
                    let addr = server.local_connect_addr().to_string();
                    Ok((Store::Tcp(client(&addr, "this process")?), Some(server)))
                });
                served.map_err(|e| format!("{e} (MASTER_ADDR={host:?}, MASTER_PORT={port})"))
            } else {
                let store = client(&join_host_port(host, port), "the master (rank 0)")?;
                Ok((Store::Tcp(store), None))
            }
        }
        _ => {
            let server = start_server(&["127.0.0.1:0".to_string()], secret, limits)?;
            let addr = server.local_connect_addr().to_string();
            Ok((Store::Tcp(client(&addr, "this process")?), Some(server)))
        }
    }
}

/// Starts the store server on the first of `binds` that is an address of
/// this host.
fn start_server(
    binds: &[String],
    secret: &JobSecret,
    limits: &StoreLimits,
) -> Result<TcpStoreServer, String> {
    let failed = |e: std::io::Error| {
        let hint = match e.kind() {
            std::io::ErrorKind::AddrInUse => "; is another job using this port?",
            _ => "",
        };
        format!("rank 0 could not start the store server: {e}{hint}")
    };
    let mut last = None;
    for bind in binds {
        match TcpStoreServer::start(bind, secret, *limits) {
            Ok(server) => return Ok(server),
            Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => last = Some(e),
            Err(e) => return Err(failed(e)),
        }
    }
    Err(failed(last.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no address to bind")
    })))
}

/// Where rank 0's store listens, in order of preference. The address
/// `MASTER_ADDR` names, so `127.0.0.1` (or `localhost`) keeps the store on
/// loopback and a host's address keeps it off the others. All interfaces
/// when that address is not one of this host's (a NAT or virtual address
/// other hosts reach it by), or when a host name resolves here only to
/// loopback (the `127.0.1.1` entry some systems give the machine's own
/// name) while other hosts resolve it to a real address. On any interface
/// the handshake refuses whoever lacks the job secret.
pub fn store_bind_addrs(host: &str, port: u16) -> Result<Vec<String>, String> {
    let literal = host.parse::<IpAddr>().ok();
    let resolved: Vec<IpAddr> = match literal {
        Some(ip) => vec![ip],
        None => (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("MASTER_ADDR={host:?} does not resolve: {e}"))?
            .map(|a| a.ip())
            .collect(),
    };
    let first = *resolved
        .first()
        .ok_or_else(|| format!("MASTER_ADDR={host:?} resolves to no address"))?;
    let at = |ip: IpAddr| SocketAddr::new(ip, port).to_string();
    let any = |ip: IpAddr| match ip {
        IpAddr::V4(_) => at(Ipv4Addr::UNSPECIFIED.into()),
        IpAddr::V6(_) => at(Ipv6Addr::UNSPECIFIED.into()),
    };
    let means_loopback = literal.is_some() || host == "localhost" || host.ends_with(".localhost");
    Ok(match resolved.iter().find(|ip| !ip.is_loopback()) {
        Some(&ip) => vec![at(ip), any(ip)],
        None if means_loopback => vec![at(first)],
        None => vec![any(first)],
    })
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

// ---------------------------------------------------------------------------
// Job ids and generations

/// The id that scopes this job's keys: `SHOAL_JOB_ID`, else the launcher's
/// (`TORCHELASTIC_RUN_ID`, `SLURM_JOB_ID.SLURM_STEP_ID`, OpenMPI's job id),
/// else "default".
pub fn job_id(env: Env) -> String {
    let slurm = nonempty(env, "SLURM_JOB_ID").map(|job| match nonempty(env, "SLURM_STEP_ID") {
        Some(step) => format!("slurm-{job}.{step}"),
        None => format!("slurm-{job}"),
    });
    nonempty(env, "SHOAL_JOB_ID")
        .or_else(|| nonempty(env, "TORCHELASTIC_RUN_ID").map(|id| format!("torchrun-{id}")))
        .or(slurm)
        .or_else(|| {
            [
                "OMPI_MCA_ess_base_jobid",
                "OMPI_MCA_orte_ess_jobid",
                "PMIX_NAMESPACE",
            ]
            .iter()
            .find_map(|v| nonempty(env, v))
            .map(|id| format!("ompi-{id}"))
        })
        .unwrap_or_else(|| "default".to_string())
}

/// The key prefix of one initialisation of one job.
pub fn scope(job: &str, generation: u64) -> String {
    format!("shoal/{job}/{generation}")
}

/// The keys by which the initialisations of one job (at one world size)
/// find each other, outside every generation's scope.
struct JobKeys {
    /// How many generations rank 0s have opened; only rank 0 adds to it, so
    /// a rank that dies before joining cannot leave it off by one.
    generations: String,
    /// The generation gathering its ranks, while one is, and rank 0's world
    /// size (`<generation> <world>`), so a rank started with another world
    /// size is told at once instead of waiting for a generation of its own.
    open: String,
}

impl JobKeys {
    fn new(job: &str) -> JobKeys {
        JobKeys {
            generations: format!("shoal/{job}/generations"),
            open: format!("shoal/{job}/open"),
        }
    }
}

/// Within a generation's scope: where rank `r` publishes its host id, and
/// where rank 0 publishes everyone's.
fn host_key(rank: usize) -> String {
    format!("rdzv/host/{rank}")
}
const HOSTS_KEY: &str = "rdzv/hosts";

/// What rank 0 of a newer initialisation writes as the host list of an
/// older one that never finished (its launch crashed), so that ranks waiting
/// there move to the newer one. No real list starts with a newline: host
/// ids are never empty.
const SUPERSEDED: &[u8] = b"\nsuperseded";

/// Pause before a rank looks for an open generation again after losing the store.
const REJOIN_PAUSE: Duration = Duration::from_millis(50);

/// What a rank publishes as its host id when its world size is not rank
/// 0's, so that rank 0 names the disagreement rather than waiting for it.
/// Like [`SUPERSEDED`], it starts with a newline, which no host id does.
const OTHER_WORLD: &str = "\nworld ";

/// `(generation, world size)` of an open key.
fn parse_open(value: &[u8]) -> Option<(u64, usize)> {
    let text = std::str::from_utf8(value).ok()?;
    let (generation, world) = text.trim().split_once(' ')?;
    Some((generation.parse().ok()?, world.parse().ok()?))
}

fn world_disagreement(rank: usize, world: usize, rank0_world: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "ranks disagree on the world size: rank 0 has {rank0_world}, rank {rank} has {world}"
        ),
    )
}

/// Rank 0: opens a new generation for its ranks to join, and marks the
/// previously open one, if a crashed launch left it open, as superseded.
fn open_generation(store: &Store, keys: &JobKeys, job: &str, world: usize) -> std::io::Result<u64> {
    let count = store.add(&keys.generations, 1)?;
    let generation = u64::try_from(count - 1).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "key '{}' holds {}, not a count",
                keys.generations,
                count - 1
            ),
        )
    })?;
    let stale = match store.check(&[&keys.open])? {
        true => parse_open(&store.get(&keys.open)?).map(|(g, _)| g),
        false => None,
    };
    // Open the new one first: a rank sent away from the stale one finds it.
    store.set(&keys.open, format!("{generation} {world}").as_bytes())?;
    if let Some(stale) = stale.filter(|&g| g != generation) {
        store.set(&format!("{}/{HOSTS_KEY}", scope(job, stale)), SUPERSEDED)?;
    }
    Ok(generation)
}

/// Rank 0: gathers every rank's host id, closes the generation, then
/// publishes the list. Closing first means a generation whose list exists is
/// never open, so the ranks of a later initialisation cannot mistake it for theirs.
fn gather_hosts(
    store: &Store,
    scoped: &ScopedStore,
    keys: &JobKeys,
    world: usize,
    host_id: &str,
) -> std::io::Result<Vec<u8>> {
    scoped.set(&host_key(0), host_id.as_bytes())?;
    let ids = (0..world)
        .map(|r| {
            let id = scoped.get(&host_key(r)).map_err(|e| match e.kind() {
                std::io::ErrorKind::TimedOut => with_context(e, format!("rank {r} did not join")),
                _ => e,
            })?;
            match String::from_utf8_lossy(&id).strip_prefix(OTHER_WORLD) {
                Some(theirs) => Err(world_disagreement(r, theirs.parse().unwrap_or(0), world)),
                None => Ok(id),
            }
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    store.delete(&keys.open)?;
    let joined = ids.join(&b'\n');
    scoped.set(HOSTS_KEY, &joined)?;
    Ok(joined)
}

/// Any other rank: joins the open generation (waiting until rank 0 opens
/// one), publishes its host id there and waits for the host list. A list
/// marked [`SUPERSEDED`] sends it on to the newer generation. Losing the
/// store before a generation is open (rank 0 replacing its store for the
/// next initialisation) makes it reconnect until `deadline`.
fn join_generation(
    store: &Arc<Store>,
    keys: &JobKeys,
    job: &str,
    (rank, world): (usize, usize),
    host_id: &str,
    deadline: Instant,
) -> std::io::Result<(u64, Vec<u8>)> {
    loop {
        let open = match store.get(&keys.open) {
            Ok(v) => v,
            Err(e) if is_disconnect(&e) && Instant::now() < deadline => {
                thread::sleep(REJOIN_PAUSE);
                continue;
            }
            Err(e) => return Err(with_context(e, "waiting for rank 0 to open the rendezvous")),
        };
        let (generation, rank0_world) = parse_open(&open).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("key '{}' holds {open:?}, not a generation", keys.open),
            )
        })?;
        let scoped = ScopedStore::new(store.clone(), scope(job, generation));
        if rank0_world != world {
            if rank < rank0_world {
                let told = format!("{OTHER_WORLD}{world}");
                scoped.set(&host_key(rank), told.as_bytes())?;
            }
            return Err(world_disagreement(rank, world, rank0_world));
        }
        // A rank already claimed here belongs to a launch that crashed (then
        // rank 0 supersedes this generation) or to one still running.
        let claimed = scoped.add(&format!("rdzv/claim/{rank}"), 1)? == 1;
        if claimed {
            scoped.set(&host_key(rank), host_id.as_bytes())?;
        }
        let hosts = scoped.get(HOSTS_KEY);
        if hosts.as_deref().is_ok_and(|h| h == SUPERSEDED) {
            continue;
        }
        return match (hosts, claimed) {
            (Ok(hosts), true) => Ok((generation, hosts)),
            (Ok(_), false) => Err(claimed_twice(job, generation, rank)),
            (Err(e), true) => Err(e),
            (Err(e), false) => Err(with_context(e, claimed_twice(job, generation, rank))),
        };
    }
}

/// Two launches sharing a job id and a store would otherwise mix their ranks.
fn claimed_twice(job: &str, generation: u64, rank: usize) -> std::io::Error {
    std::io::Error::other(format!(
        "another process already joined initialisation {generation} of job '{job}' as rank \
         {rank}; is another launch with this job id (SHOAL_JOB_ID) using the same store?"
    ))
}

fn with_context(e: std::io::Error, context: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{context}: {e}"))
}

/// Agrees with the other ranks on a generation (rank 0 opens it, the others
/// join it) and returns it with every rank's host id, one per line.
fn meet(
    store: &Arc<Store>,
    job: &str,
    info: &ProcessInfo,
    host_id: &str,
    timeout: Duration,
) -> std::io::Result<(u64, Vec<u8>)> {
    let keys = JobKeys::new(job);
    let me = (info.rank, info.world_size);
    if info.rank != 0 {
        let deadline = Instant::now() + timeout.min(Duration::from_secs(100 * 365 * 86_400));
        return join_generation(store, &keys, job, me, host_id, deadline);
    }
    let generation = open_generation(store, &keys, job, info.world_size)?;
    let scoped = ScopedStore::new(store.clone(), scope(job, generation));
    let joined = gather_hosts(store, &scoped, &keys, info.world_size, host_id)?;
    Ok((generation, joined))
}

// ---------------------------------------------------------------------------
// Hosts

/// Which ranks share a host (and can use shared memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMap {
    /// Host index of every rank; hosts are numbered in order of their lowest rank.
    pub host_of: Vec<usize>,
    /// The ranks on this rank's host, ascending (this rank included).
    pub local_ranks: Vec<usize>,
    /// Host id of every host index.
    pub hosts: Vec<String>,
}

impl HostMap {
    /// Builds the map from every rank's host id.
    pub fn from_ids(rank: usize, ids: &[String]) -> HostMap {
        let mut hosts: Vec<String> = Vec::new();
        let host_of: Vec<usize> = ids
            .iter()
            .map(|id| match hosts.iter().position(|h| h == id) {
                Some(i) => i,
                None => {
                    hosts.push(id.clone());
                    hosts.len() - 1
                }
            })
            .collect();
        let mine = host_of[rank];
        let local_ranks = (0..ids.len()).filter(|&r| host_of[r] == mine).collect();
        HostMap {
            host_of,
            local_ranks,
            hosts,
        }
    }

    pub fn num_hosts(&self) -> usize {
        self.hosts.len()
    }
}

/// The host id of this process: `SHOAL_HOST_ID`, else the hostname.
pub fn host_id(env: Env) -> String {
    nonempty(env, "SHOAL_HOST_ID").unwrap_or_else(hostname)
}

/// This machine's hostname ("localhost" if it cannot be read).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its full length; gethostname NUL-terminates
    // when the name fits, and we stop at the first NUL either way.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(s) if rc == 0 && !s.is_empty() => s.to_string(),
        _ => "localhost".to_string(),
    }
}

/// The host map from the host list of the rendezvous (one id per rank and line).
fn host_map(rank: usize, world: usize, joined: &[u8]) -> Result<HostMap, String> {
    let ids: Vec<String> = String::from_utf8_lossy(joined)
        .split('\n')
        .map(str::to_string)
        .collect();
    if ids.len() != world {
        return Err(format!(
            "rendezvous of rank {rank}: the store lists {} hosts for a world of {world}; \
             did ranks start with different world sizes?",
            ids.len()
        ));
    }
    Ok(HostMap::from_ids(rank, &ids))
}

fn check_host_id(host_id: &str) -> Result<(), String> {
    if host_id.is_empty() || host_id.contains('\n') {
        return Err(format!(
            "host id {host_id:?} must be non-empty and on one line"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Everything at once

/// The outcome of a full rendezvous.
pub struct Rendezvous {
    pub info: ProcessInfo,
    /// The job secret every rank holds; the store and the other channels
    /// derive their keys from it.
    pub secret: JobSecret,
    /// The store, scoped to this job and initialisation.
    pub store: ScopedStore,
    /// On rank 0 (unless the store is external): the server, which must
    /// outlive every rank's use of the store.
    pub server: Option<TcpStoreServer>,
    pub hosts: HostMap,
    pub generation: u64,
}

/// Detects the process, loads the job secret, opens the store, agrees on
/// the generation and discovers the hosts. `host_id` defaults to [`host_id`].
pub fn establish(
    explicit: &Explicit,
    env: Env,
    timeout: Duration,
    host: Option<&str>,
) -> Result<Rendezvous, String> {
    let info = detect(explicit, env)?;
    let secret = job_secret(&info, env)?;
    let limits = store_limits(env, info.world_size)?;
    let id = host.map(str::to_string).unwrap_or_else(|| host_id(env));
    check_host_id(&id)?;
    let (store, server) = connect_store(&info, &secret, &limits, timeout)?;
    let store = Arc::new(store);
    let job = job_id(env);
    let (generation, joined) = meet(&store, &job, &info, &id, timeout).map_err(|e| {
        format!(
            "rendezvous of rank {} of {}: {e}",
            info.rank, info.world_size
        )
    })?;
    let hosts = host_map(info.rank, info.world_size, &joined)?;
    Ok(Rendezvous {
        info,
        secret,
        store: ScopedStore::new(store, scope(&job, generation)),
        server,
        hosts,
        generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const TEST_SECRET: &str = "rendezvous tests' job secret";

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn det(pairs: &[(&str, &str)]) -> Result<ProcessInfo, String> {
        detect(&Explicit::default(), &env_of(pairs))
    }

    fn err(pairs: &[(&str, &str)]) -> String {
        det(pairs).unwrap_err()
    }

    #[test]
    fn nothing_set_is_a_single_process() {
        let i = det(&[]).unwrap();
        assert_eq!((i.rank, i.world_size, i.source), (0, 1, "default"));
        assert_eq!(
            (i.master_addr, i.store_addr, i.store_path),
            (None, None, None)
        );
    }

    #[test]
    fn explicit_wins_over_environment() {
        let env = env_of(&[("RANK", "3"), ("WORLD_SIZE", "4"), ("MASTER_ADDR", "m")]);
        let ex = Explicit {
            rank: Some(1),
            world_size: Some(2),
            addr: Some("h:1234".into()),
        };
        let i = detect(&ex, &env).unwrap();
        assert_eq!((i.rank, i.world_size, i.source), (1, 2, "explicit"));
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("h"), Some(1234))
        );
        // Explicit rank/world with the master from the environment.
        let ex = Explicit {
            rank: Some(0),
            world_size: Some(2),
            addr: None,
        };
        let i = detect(&ex, &env).unwrap();
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("m"), Some(29500))
        );
    }

    #[test]
    fn explicit_errors() {
        let e = |ex: Explicit| detect(&ex, &env_of(&[])).unwrap_err();
        let msg = e(Explicit {
            rank: Some(1),
            ..Default::default()
        });
        assert!(
            msg.contains("together") && msg.contains("world_size=None"),
            "{msg}"
        );
        let msg = e(Explicit {
            rank: Some(2),
            world_size: Some(2),
            addr: Some("h:1".into()),
        });
        assert!(
            msg.contains("rank=\"2\" is not below world_size=\"2\""),
            "{msg}"
        );
        let msg = e(Explicit {
            rank: Some(0),
            world_size: Some(2),
            addr: Some("h".into()),
        });
        assert!(
            msg.contains("addr=\"h\"") && msg.contains("host:port"),
            "{msg}"
        );
        let msg = e(Explicit {
            rank: Some(0),
            world_size: Some(2),
            addr: None,
        });
        assert!(
            msg.contains("MASTER_ADDR") && msg.contains("SHOAL_STORE_PATH"),
            "{msg}"
        );
    }

    #[test]
    fn torchrun_convention() {
        let i = det(&[
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ])
        .unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.local_world_size),
            (5, 8, Some(1), Some(4))
        );
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("10.0.0.1"), Some(1234))
        );
        assert_eq!(i.source, "torchrun");
    }

    #[test]
    fn shoal_run_convention_and_agent_store_port() {
        let base = [
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
        ];
        let i = det(&[
            &base[..],
            &[("SHOAL_JOB_ID", "u1"), ("MASTER_PORT", "4000")],
        ]
        .concat())
        .unwrap();
        assert_eq!((i.source, i.master_port), ("shoal", Some(4000)));
        let i = det(&[&base[..], &[("TORCHELASTIC_USE_AGENT_STORE", "True")]].concat()).unwrap();
        assert_eq!(i.master_port, Some(29501));
    }

    #[test]
    fn torchrun_errors_name_variable_and_value() {
        let m = [("MASTER_ADDR", "h")];
        let with = |extra: &[(&str, &str)]| err(&[&m[..], extra].concat());
        assert!(with(&[("RANK", "1")]).contains("RANK is set but WORLD_SIZE is not"));
        assert!(with(&[("WORLD_SIZE", "2")]).contains("WORLD_SIZE is set but RANK is not"));
        let e = with(&[("RANK", "x"), ("WORLD_SIZE", "2")]);
        assert!(
            e.contains("RANK=\"x\" is not a non-negative integer"),
            "{e}"
        );
        let e = with(&[("RANK", "2"), ("WORLD_SIZE", "2")]);
        assert!(
            e.contains("RANK=\"2\" is not below WORLD_SIZE=\"2\""),
            "{e}"
        );
        let e = with(&[("RANK", "0"), ("WORLD_SIZE", "0")]);
        assert!(
            e.contains("WORLD_SIZE=\"0\"") && e.contains("at least 1"),
            "{e}"
        );
        let e = with(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "70000")]);
        assert!(
            e.contains("MASTER_PORT=\"70000\" is not a port number"),
            "{e}"
        );
        let e = with(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "2"),
            ("LOCAL_WORLD_SIZE", "2"),
        ]);
        assert!(
            e.contains("LOCAL_RANK=\"2\" is not below LOCAL_WORLD_SIZE=\"2\""),
            "{e}"
        );
        let e = with(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_WORLD_SIZE", "3"),
        ]);
        assert!(
            e.contains("LOCAL_WORLD_SIZE=\"3\" exceeds WORLD_SIZE=\"2\""),
            "{e}"
        );
        let e = err(&[("RANK", "0"), ("WORLD_SIZE", "2")]);
        assert!(e.contains("no store") && e.contains("MASTER_ADDR"), "{e}");
    }

    #[test]
    fn slurm_convention() {
        let i = det(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "7"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "2"),
            ("SLURM_TASKS_PER_NODE", "2(x3),1"),
            ("SLURM_JOB_NODELIST", "gpu[007-009,012],cpu1"),
            ("SLURM_JOB_ID", "123456"),
        ])
        .unwrap();
        assert_eq!((i.rank, i.world_size, i.source), (5, 7, "slurm"));
        assert_eq!((i.local_rank, i.local_world_size), (Some(1), Some(2)));
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("gpu007"), Some(23456))
        );
    }

    #[test]
    fn slurm_overrides_and_variants() {
        let i = det(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_NTASKS_PER_NODE", "4"),
            ("SLURM_TASKS_PER_NODE", "garbage"),
            ("SLURM_NODELIST", "n1"),
            ("MASTER_ADDR", "login"),
            ("MASTER_PORT", "5000"),
        ])
        .unwrap();
        assert_eq!(i.local_world_size, Some(4));
        assert_eq!(
            (i.master_addr.as_deref(), i.master_port),
            (Some("login"), Some(5000))
        );
        // Uniform tasks per node needs no SLURM_NODEID; the step list wins.
        let i = det(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
            ("SLURM_STEP_NODELIST", "b[3-4]"),
            ("SLURM_JOB_NODELIST", "a[1-9]"),
        ])
        .unwrap();
        assert_eq!(
            (i.local_world_size, i.master_addr.as_deref()),
            (Some(2), Some("b3"))
        );
        // Torchrun variables take precedence over Slurm's.
        let i = det(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
        ])
        .unwrap();
        assert_eq!(i.source, "torchrun");
    }

    #[test]
    fn slurm_errors() {
        let e = err(&[("SLURM_PROCID", "0")]);
        assert!(e.contains("neither SLURM_NTASKS nor SLURM_NPROCS"), "{e}");
        let i = det(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NPROCS", "2"),
            ("SLURM_NODELIST", "n"),
        ]);
        assert_eq!(i.unwrap().world_size, 2);
        let e = err(&[
            ("SLURM_PROCID", "4"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_NODELIST", "n"),
        ]);
        assert!(
            e.contains("SLURM_PROCID=\"4\" is not below SLURM_NTASKS=\"4\""),
            "{e}"
        );
        let e = err(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_NODELIST", "n[1-"),
        ]);
        assert!(e.contains("SLURM_NODELIST=\"n[1-\""), "{e}");
        let e = err(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_TASKS_PER_NODE", "2(x"),
        ]);
        assert!(e.contains("SLURM_TASKS_PER_NODE=\"2(x\""), "{e}");
        let e = err(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_NODEID", "5"),
            ("SLURM_TASKS_PER_NODE", "1(x2)"),
        ]);
        assert!(e.contains("SLURM_NODEID=\"5\""), "{e}");
    }

    #[test]
    fn nodelist_expansion() {
        let ex = |s| expand_nodelist(s).unwrap();
        assert_eq!(
            ex("node[01-04,07]"),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(ex("a1,b[9-10],c"), ["a1", "b9", "b10", "c"]);
        assert_eq!(ex("r[1-2]n[1-2]"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(ex("x[5]-ib"), ["x5-ib"]);
        for bad in ["n[1-", "n]1[", "n[a-b]", "n[3-1]", "n[[1]]"] {
            assert!(expand_nodelist(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert!(parse_tasks_per_node("x").is_err());
    }

    #[test]
    fn openmpi_convention() {
        let env = [
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("SHOAL_STORE_ADDR", "store:7000"),
        ];
        let i = det(&env).unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.local_rank, i.local_world_size),
            (3, 4, Some(1), Some(2))
        );
        assert_eq!(
            (i.source, i.store_addr.as_deref(), i.master_addr),
            ("openmpi", Some("store:7000"), None)
        );
        let e = err(&env[..4]);
        assert!(e.contains("no store"), "{e}");
        let e = err(&[("OMPI_COMM_WORLD_RANK", "0")]);
        assert!(e.contains("OMPI_COMM_WORLD_SIZE"), "{e}");
        let e = err(&[&env[..], &[("OMPI_COMM_WORLD_LOCAL_RANK", "x")]].concat());
        assert!(e.contains("OMPI_COMM_WORLD_LOCAL_RANK=\"x\""), "{e}");
    }

    #[test]
    fn store_variables() {
        let i = det(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("SHOAL_STORE_PATH", "/shared/rdzv"),
        ])
        .unwrap();
        assert_eq!(i.store_path, Some(PathBuf::from("/shared/rdzv")));
        let e = err(&[("SHOAL_STORE_ADDR", "nohost")]);
        assert!(e.contains("SHOAL_STORE_ADDR=\"nohost\""), "{e}");
        assert_eq!(
            split_host_port("[::1]:80").unwrap(),
            ("::1".to_string(), 80)
        );
        assert!(split_host_port(":80").is_err());
    }

    #[test]
    fn job_ids() {
        let j = |pairs: &[(&str, &str)]| job_id(&env_of(pairs));
        assert_eq!(j(&[]), "default");
        assert_eq!(j(&[("SHOAL_JOB_ID", "x"), ("SLURM_JOB_ID", "1")]), "x");
        assert_eq!(
            j(&[("TORCHELASTIC_RUN_ID", "r"), ("SLURM_JOB_ID", "1")]),
            "torchrun-r"
        );
        assert_eq!(
            j(&[("SLURM_JOB_ID", "1"), ("SLURM_STEP_ID", "2")]),
            "slurm-1.2"
        );
        assert_eq!(j(&[("OMPI_MCA_ess_base_jobid", "77")]), "ompi-77");
    }

    #[test]
    fn host_map_numbers_hosts_by_first_rank() {
        let ids: Vec<String> = ["b", "a", "b", "c", "a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let m = HostMap::from_ids(4, &ids);
        assert_eq!(m.host_of, [0, 1, 0, 2, 1]);
        assert_eq!(m.local_ranks, [1, 4]);
        assert_eq!((m.num_hosts(), m.hosts[2].as_str()), (3, "c"));
        assert!(!hostname().is_empty());
        assert_eq!(host_id(&env_of(&[("SHOAL_HOST_ID", "h7")])), "h7");
    }

    /// Runs `f(rank, env)` on `world` threads, each with its own environment.
    fn run_ranks<T: Send + 'static>(
        world: usize,
        extra: &[(&str, &str)],
        f: impl Fn(usize, &dyn Fn(&str) -> Option<String>) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        let f = Arc::new(f);
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let threads: Vec<_> = (0..world)
            .map(|r| {
                let (f, mut vars) = (f.clone(), extra.clone());
                vars.push(("RANK".into(), r.to_string()));
                vars.push(("WORLD_SIZE".into(), world.to_string()));
                vars.push(("SHOAL_SECRET".into(), TEST_SECRET.into()));
                thread::spawn(move || {
                    let pairs: Vec<(&str, &str)> =
                        vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    f(r, &env_of(&pairs))
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    fn free_port() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    }

    #[test]
    fn establish_over_master_server() {
        let port = free_port();
        let extra = [
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", port.as_str()),
            ("SHOAL_JOB_ID", "j"),
        ];
        let results = run_ranks(4, &extra, |r, env| {
            let host = if r < 2 { "hA" } else { "hB" };
            let a = establish(
                &Explicit::default(),
                env,
                Duration::from_secs(20),
                Some(host),
            )
            .unwrap();
            // Keep rank 0's server alive until everyone is done with it.
            a.store.set(&format!("done/{r}"), b"1").unwrap();
            if r == 0 {
                (0..4).for_each(|p| drop(a.store.get(&format!("done/{p}")).unwrap()));
            }
            (a.generation, a.hosts, a.server.is_some())
        });
        for (r, (gen, hosts, served)) in results.into_iter().enumerate() {
            assert_eq!(gen, 0);
            assert_eq!(hosts.host_of, [0, 0, 1, 1]);
            assert_eq!(hosts.local_ranks, if r < 2 { [0, 1] } else { [2, 3] });
            assert_eq!(hosts.hosts, ["hA", "hB"]);
            assert_eq!(served, r == 0);
        }
    }

    #[test]
    fn establish_over_file_store_with_generations() {
        let dir = crate::store::tests::temp_dir("rdzv");
        let d = dir.to_string_lossy().to_string();
        let extra = [
            ("SHOAL_STORE_PATH", d.as_str()),
            ("SHOAL_JOB_ID", "jf"),
            ("SHOAL_HOST_ID", "one"),
        ];
        let gens = run_ranks(3, &extra, |_, env| {
            let t = Duration::from_secs(20);
            let a = establish(&Explicit::default(), env, t, None).unwrap();
            let b = establish(&Explicit::default(), env, t, None).unwrap();
            assert_eq!(a.hosts.local_ranks, [0, 1, 2]);
            assert!(a.server.is_none());
            (a.generation, b.generation, b.store.prefix().to_string())
        });
        for (ga, gb, prefix) in gens {
            assert_eq!((ga, gb), (0, 1));
            assert_eq!(prefix, "shoal/jf/1");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn single_process_needs_no_configuration() {
        let a = establish(
            &Explicit::default(),
            &env_of(&[]),
            Duration::from_secs(5),
            Some("h"),
        )
        .unwrap();
        assert_eq!(
            (a.info.world_size, a.hosts.local_ranks.clone()),
            (1, vec![0])
        );
        assert!(a.server.is_some());
    }

    #[test]
    fn bad_host_ids_and_a_missing_rank_0_are_clear_errors() {
        let dir = crate::store::tests::temp_dir("missing0");
        let d = dir.to_string_lossy().to_string();
        let env = env_of(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("SHOAL_STORE_PATH", &d),
            ("SHOAL_SECRET", TEST_SECRET),
        ]);
        let t = Duration::from_millis(200);
        let e = establish(&Explicit::default(), &env, t, Some("a\nb"))
            .err()
            .unwrap();
        assert!(e.contains("one line"), "{e}");
        let e = establish(&Explicit::default(), &env, t, Some("h"))
            .err()
            .unwrap();
        assert!(
            e.contains("rank 1 of 2")
                && e.contains("waiting for rank 0 to open the rendezvous")
                && e.contains("timed out after 0.2s"),
            "{e}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn rank0_port_in_use_is_a_clear_error() {
        let busy = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = busy.local_addr().unwrap().port().to_string();
        let env = env_of(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", &port),
        ]);
        let info = detect(&Explicit::default(), &env).unwrap();
        let secret = crate::store::tests::secret(TEST_SECRET);
        let limits = StoreLimits::default();
        let e = connect_store(&info, &secret, &limits, Duration::from_secs(1))
            .err()
            .unwrap();
        assert!(
            e.contains("could not start the store server")
                && e.contains("another job using this port")
                && e.contains(&port),
            "{e}"
        );
    }

    #[test]
    fn store_listens_where_master_addr_points() {
        let p = 29_400;
        assert_eq!(
            store_bind_addrs("127.0.0.1", p).unwrap(),
            ["127.0.0.1:29400"]
        );
        assert_eq!(store_bind_addrs("::1", p).unwrap(), ["[::1]:29400"]);
        for ok in store_bind_addrs("localhost", p).unwrap() {
            assert!(ok.parse::<SocketAddr>().unwrap().ip().is_loopback(), "{ok}");
        }
        // An address this host does not have (NAT, virtual): all interfaces next.
        assert_eq!(
            store_bind_addrs("203.0.113.9", p).unwrap(),
            ["203.0.113.9:29400", "0.0.0.0:29400"]
        );
        let secret = crate::store::tests::secret(TEST_SECRET);
        let binds = store_bind_addrs("203.0.113.9", 0).unwrap();
        let server = start_server(&binds, &secret, &StoreLimits::default()).unwrap();
        assert!(server.addr().ip().is_unspecified());
        let e = store_bind_addrs("no-such-host.invalid", p).unwrap_err();
        assert!(
            e.contains("MASTER_ADDR=\"no-such-host.invalid\" does not resolve"),
            "{e}"
        );
    }

    #[test]
    fn master_addr_may_be_this_hosts_name() {
        let port = free_port();
        let host = hostname();
        let extra = [
            ("MASTER_ADDR", host.as_str()),
            ("MASTER_PORT", port.as_str()),
            ("SHOAL_JOB_ID", "named"),
        ];
        let gens = run_ranks(2, &extra, |r, env| {
            let a = establish(&Explicit::default(), env, Duration::from_secs(20), None).unwrap();
            a.store.set(&format!("done/{r}"), b"1").unwrap();
            if r == 0 {
                (0..2).for_each(|p| drop(a.store.get(&format!("done/{p}")).unwrap()));
            }
            a.generation
        });
        assert_eq!(gens, [0, 0]);
    }

    #[test]
    fn a_crashed_rendezvous_is_superseded() {
        let dir = crate::store::tests::temp_dir("crashed");
        let d = dir.to_string_lossy().to_string();
        let extra = [
            ("SHOAL_STORE_PATH", d.as_str()),
            ("SHOAL_JOB_ID", "c"),
            ("SHOAL_HOST_ID", "h"),
        ];
        // Rank 2 never comes: ranks 0 and 1 give up, the generation stays open.
        let failed = run_ranks(3, &extra, |r, env| {
            (r < 2).then(|| establish(&Explicit::default(), env, Duration::from_millis(300), None))
        });
        assert!(failed.iter().flatten().all(|a| a.is_err()));
        let gens = run_ranks(3, &extra, |r, env| {
            if r == 0 {
                thread::sleep(Duration::from_millis(200)); // the others find the stale one first
            }
            let t = Duration::from_secs(20);
            establish(&Explicit::default(), env, t, None)
                .unwrap()
                .generation
        });
        assert_eq!(gens, [1, 1, 1]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn two_processes_claiming_one_rank_are_refused() {
        let dir = crate::store::tests::temp_dir("claim");
        let d = dir.to_string_lossy().to_string();
        let base = [
            ("SHOAL_STORE_PATH", d.as_str()),
            ("SHOAL_JOB_ID", "twice"),
            ("SHOAL_HOST_ID", "h"),
            ("SHOAL_SECRET", TEST_SECRET),
            ("WORLD_SIZE", "2"),
        ];
        let join = |rank: &'static str, timeout_ms| {
            let mut vars: Vec<(String, String)> = base
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            vars.push(("RANK".into(), rank.into()));
            thread::spawn(move || {
                let pairs: Vec<(&str, &str)> =
                    vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let t = Duration::from_millis(timeout_ms);
                establish(&Explicit::default(), &env_of(&pairs), t, None).map(|a| a.generation)
            })
        };
        let (first, second) = (join("1", 3000), join("1", 3000));
        let zero = join("0", 3000);
        let results = [first.join().unwrap(), second.join().unwrap()];
        assert_eq!(zero.join().unwrap(), Ok(0));
        let errors: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(errors.len(), 1, "{results:?}");
        assert!(errors[0].contains("already joined initialisation 0 of job 'twice' as rank 1"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn store_limits_from_the_environment() {
        let l = store_limits(&env_of(&[]), 8).unwrap();
        assert_eq!(
            (l.max_value, l.max_connections),
            (DEFAULT_MAX_VALUE, 8 + CONNECTION_MARGIN)
        );
        let l = store_limits(&env_of(&[("SHOAL_STORE_MAX_VALUE", "4096")]), 1).unwrap();
        assert_eq!(l.max_value, 4096);
        for bad in ["0", "-1", "64MiB", "1e6"] {
            let e = store_limits(&env_of(&[("SHOAL_STORE_MAX_VALUE", bad)]), 1).unwrap_err();
            assert!(
                e.contains("SHOAL_STORE_MAX_VALUE") && e.contains(bad),
                "{e}"
            );
        }
    }
}
