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
//! [`TcpStoreServer`] that rank 0 starts on the master address. `MASTER_PORT`
//! defaults to 29500; under Slurm to a port derived from the job id, so jobs
//! sharing a first node do not collide. Under a torchrun agent that already
//! serves torch's own store on `MASTER_PORT` (`TORCHELASTIC_USE_AGENT_STORE`),
//! shoal's store uses `MASTER_PORT + 1`.
//!
//! Every key is scoped by a job id ([`job_id`]) and a generation
//! ([`next_generation`]), so several jobs, or several initialisations of one
//! job, can share a store.
//!
//! The environment is read through an injected accessor so tests are hermetic.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shoal_transport::KvStore;

use crate::store::{FileStore, ScopedStore, Store, TcpStore, TcpStoreServer};

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

/// Opens the store for `info`. With an external store (`SHOAL_STORE_PATH`,
/// `SHOAL_STORE_ADDR`) everyone is a client. Otherwise rank 0 starts a
/// [`TcpStoreServer`] on the master port (all interfaces, so the master host
/// name may resolve to any of them) and every rank, rank 0 included,
/// connects to it. A single process without a master uses a private
/// loopback server on an ephemeral port. The server must be kept alive until
/// every rank is done with the store.
pub fn connect_store(
    info: &ProcessInfo,
    timeout: Duration,
) -> Result<(Store, Option<TcpStoreServer>), String> {
    if let Some(dir) = &info.store_path {
        let s = FileStore::new(dir, timeout).map_err(|e| format!("SHOAL_STORE_PATH: {e}"))?;
        return Ok((Store::File(s), None));
    }
    if let Some(addr) = &info.store_addr {
        return Ok((
            Store::Tcp(tcp_client(addr, timeout, "SHOAL_STORE_ADDR")?),
            None,
        ));
    }
    match (&info.master_addr, info.master_port) {
        (Some(host), Some(port)) if info.world_size > 1 => {
            if info.rank == 0 {
                serve_and_connect(&bind_addr(host, port), timeout)
                    .map_err(|e| format!("{e} (MASTER_ADDR={host:?}, MASTER_PORT={port})"))
            } else {
                let addr = join_host_port(host, port);
                Ok((
                    Store::Tcp(tcp_client(&addr, timeout, "the master (rank 0)")?),
                    None,
                ))
            }
        }
        _ => serve_and_connect("127.0.0.1:0", timeout),
    }
}

fn tcp_client(addr: &str, timeout: Duration, what: &str) -> Result<TcpStore, String> {
    TcpStore::connect(addr, timeout).map_err(|e| format!("store of {what}: {e}"))
}

/// Starts a server on `bind` and connects to it over loopback.
fn serve_and_connect(
    bind: &str,
    timeout: Duration,
) -> Result<(Store, Option<TcpStoreServer>), String> {
    let server = TcpStoreServer::start(bind).map_err(|e| {
        format!("rank 0 could not start the store server: {e}; is another job using this port?")
    })?;
    let addr = server.local_connect_addr().to_string();
    let client = tcp_client(&addr, timeout, "this process")?;
    Ok((Store::Tcp(client), Some(server)))
}

/// All interfaces of the master's address family.
fn bind_addr(master_host: &str, port: u16) -> String {
    if master_host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[::]:{port}")
    } else {
        format!("0.0.0.0:{port}")
    }
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

/// The number of this initialisation within the job: 0 for the first,
/// 1 for the next, ... Every rank adds 1 to a shared counter; since an
/// initialisation completes only after every rank has joined it (see
/// [`discover_hosts`]), all adds of one generation precede any of the next,
/// so `(count - 1) / world` is the same on every rank. The counter is per
/// world size, so initialisations with another world size do not disturb it.
pub fn next_generation(store: &Store, job: &str, world: usize) -> Result<u64, String> {
    let key = format!("shoal/{job}/inits/w{world}");
    let count = store.add(&key, 1).map_err(|e| format!("rendezvous: {e}"))?;
    Ok((count.max(1) as u64 - 1) / world.max(1) as u64)
}

/// The key prefix of one initialisation of one job.
pub fn scope(job: &str, generation: u64) -> String {
    format!("shoal/{job}/{generation}")
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

/// Every rank publishes its host id and learns every rank's. Rank 0 gathers
/// the ids and publishes them as one value, so the store serves O(world)
/// requests rather than O(world^2). `job` is the key prefix (see [`scope`]).
/// Returns only after all ranks have published.
pub fn discover_hosts(
    rank: usize,
    world: usize,
    store: &dyn KvStore,
    job: &str,
    host_id: &str,
) -> Result<HostMap, String> {
    if host_id.is_empty() || host_id.contains('\n') {
        return Err(format!(
            "host id {host_id:?} must be non-empty and on one line"
        ));
    }
    let fail = |e: std::io::Error| format!("rendezvous of rank {rank} of {world}: {e}");
    store
        .set(&format!("{job}/host/{rank}"), host_id.as_bytes())
        .map_err(fail)?;
    let all_key = format!("{job}/hosts");
    let joined = if rank == 0 {
        let ids = (0..world)
            .map(|r| store.get(&format!("{job}/host/{r}")))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(fail)?;
        let joined = ids.join(&b'\n');
        store.set(&all_key, &joined).map_err(fail)?;
        joined
    } else {
        store.get(&all_key).map_err(fail)?
    };
    let ids: Vec<String> = String::from_utf8_lossy(&joined)
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

// ---------------------------------------------------------------------------
// Everything at once

/// The outcome of a full rendezvous.
pub struct Rendezvous {
    pub info: ProcessInfo,
    /// The store, scoped to this job and initialisation.
    pub store: ScopedStore,
    /// On rank 0 (unless the store is external): the server, which must
    /// outlive every rank's use of the store.
    pub server: Option<TcpStoreServer>,
    pub hosts: HostMap,
    pub generation: u64,
}

/// Detects the process, opens the store, picks the generation and
/// discovers the hosts. `host_id` defaults to [`host_id`].
pub fn establish(
    explicit: &Explicit,
    env: Env,
    timeout: Duration,
    host: Option<&str>,
) -> Result<Rendezvous, String> {
    let info = detect(explicit, env)?;
    let (store, server) = connect_store(&info, timeout)?;
    let job = job_id(env);
    let generation = next_generation(&store, &job, info.world_size)?;
    let store = ScopedStore::new(Arc::new(store), scope(&job, generation));
    let id = host.map(str::to_string).unwrap_or_else(|| host_id(env));
    let hosts = discover_hosts(info.rank, info.world_size, &store, "rdzv", &id)?;
    Ok(Rendezvous {
        info,
        store,
        server,
        hosts,
        generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::thread;

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
    fn discover_hosts_rejects_bad_ids_and_times_out_clearly() {
        let (store, _server) =
            connect_store(&det(&[]).unwrap(), Duration::from_millis(200)).unwrap();
        let e = discover_hosts(0, 1, &store, "j", "a\nb").unwrap_err();
        assert!(e.contains("one line"), "{e}");
        let e = discover_hosts(1, 2, &store, "j", "h").unwrap_err();
        assert!(
            e.contains("rank 1 of 2") && e.contains("waiting for key 'j/hosts'"),
            "{e}"
        );
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
        let e = connect_store(&info, Duration::from_secs(1)).err().unwrap();
        assert!(
            e.contains("could not start the store server") && e.contains(&port),
            "{e}"
        );
    }
}
