//! Joining a job: rendezvous through the store, building the transports, and
//! returning the world communicator.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use shoal_transport::auth::{random_bytes, to_hex};
use shoal_transport::routed::Net;
use shoal_transport::tcp::congestion_in_effect;
use shoal_transport::{KvStore, Routed, RoutedConfig};
use tracing::{debug, info};

use crate::agree;
use crate::agree::version::{self, Build};
use crate::calibrate::{calibrate, describe, Partners};
use crate::comm::{Communicator, Engine};
use crate::config::{AdaptMode, Config, RemoteChoice, TransportChoice};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ina::Ina;
use crate::log::{self, Who};
use crate::rendezvous::{detect, establish, Explicit, Rendezvous};
use crate::select::{parse_cost, Selector, SHM_COST, TCP_COST};
use crate::trace::{measure_offset, WordExchange};
use crate::tune::{self, Tables};

/// What `shoal.init()` was given explicitly; the environment fills the rest.
#[derive(Clone, Debug, Default)]
pub struct InitArgs {
    pub rank: Option<usize>,
    pub world_size: Option<usize>,
    /// `host:port` where rank 0 serves the rendezvous store.
    pub addr: Option<String>,
}

/// Rendezvous with the other ranks and connect to them.
pub fn init_world(args: &InitArgs) -> Result<Communicator> {
    crate::trace::process_origin();
    let config = Config::from_process_env()?;
    let log_settings = log::Settings::from_process_env(log::RANK_DEFAULT)?;
    let env = |k: &str| std::env::var(k).ok();
    let explicit = Explicit {
        rank: args.rank,
        world_size: args.world_size,
        addr: args.addr.clone(),
    };
    // The launcher's variables give the rank before rendezvous: the logger
    // goes in first so what rank 0's store server warns of while the job
    // meets (strangers refused) is logged too.
    let rank = detect(&explicit, &env)?.rank;
    log::install(log_settings, Who::Rank(rank))?;
    if uses_ucx(&config) {
        // Before the rendezvous: a machine without UCX fails at once, with
        // the package to install, whatever the world size.
        shoal_transport::ucx::probe_library(&config.ucx_lib).map_err(Error::runtime)?;
    }
    let rdzv = establish(&explicit, &env, config.timeout, config.host_id.as_deref())?;
    let multi_host = rdzv.hosts.num_hosts() > 1;
    if config.transport == TransportChoice::Shm && multi_host {
        return Err(Error::invalid(format!(
            "SHOAL_TRANSPORT=shm needs every rank on one host, but the ranks are on {} hosts ({})",
            rdzv.hosts.num_hosts(),
            rdzv.hosts.hosts.join(", ")
        )));
    }
    let transport = build_transport(&config, &rdzv)?;
    if rdzv.info.rank == 0 {
        report_setup(&config, &rdzv, &transport);
    }
    // Every rank must price algorithms alike so they all pick the same one.
    let cost = if multi_host || config.transport == TransportChoice::Tcp {
        TCP_COST
    } else {
        SHM_COST
    };
    let cost = parse_cost(&config.cost, cost)?;
    let measure = config.calibrate && config.cost.trim().is_empty() && rdzv.info.world_size > 1;
    let partners = calibration_partners(&rdzv);
    let cost_source = unmeasured_cost_source(&config, rdzv.info.world_size);
    let selector = Selector::new(&config.algo, cost)?;
    let one_host = !multi_host && config.transport != TransportChoice::Tcp;
    selector.allow_shared_memory(one_host && shared_memory_readable(&transport));
    let local_ranks = rdzv.hosts.local_ranks.clone();
    let host_of = rdzv.hosts.host_of.clone();
    let ina = Ina::join_from_env(
        rdzv.info.rank,
        rdzv.info.world_size,
        &rdzv.secret,
        &rdzv.store,
        &config.ina,
    )?;
    let mut keepalive: Vec<Box<dyn std::any::Any + Send + Sync>> = vec![Box::new(rdzv.store)];
    if let Some(server) = rdzv.server {
        keepalive.push(Box::new(server));
    }
    let engine = Arc::new(Engine::new(
        Box::new(transport),
        config,
        selector,
        local_ranks,
        host_of,
        ina,
        keepalive,
    ));
    let world = Communicator::world(engine.clone());
    agree_on_build(&world)?;
    if measure {
        engine
            .selector
            .set_cost(calibrate(&world, &partners, cost)?);
    } else if world.rank() == 0 {
        info!(
            "cost model ({cost_source}): {}",
            describe(&cost, multi_host)
        );
    }
    let transport_class = match engine.config.transport {
        TransportChoice::Ucx => tune::Transport::Ucx,
        TransportChoice::Tcp => tune::Transport::Tcp,
        _ if multi_host => tune::Transport::Tcp,
        _ => tune::Transport::Shm,
    };
    engine
        .selector
        .set_tables(agree_on_tables(&world, transport_class)?);
    agree_on_adaptation(&world)?;
    start_trace(&world)?;
    Ok(world)
}

/// Loads this rank's tuning tables (`SHOAL_TUNE_FILE`'s and the built-in
/// one) and checks that every rank of `world` loaded the same rows
/// (`Tables::agree`). Collective: every rank calls it at init.
fn agree_on_tables(world: &Communicator, transport: tune::Transport) -> Result<Tables> {
    let config = &world.engine().config;
    let path = config.tune_file.as_deref();
    let machine = tune::Machine {
        transport,
        cpus: config.host_cpus,
        vendor: tune::local_vendor(),
    };
    let tables = Tables::load(path, config.tune_builtin, machine)?;
    if world.size() == 1 {
        return Ok(tables);
    }
    let all = world.allgather_bytes(&tables.agreement_record())?;
    tables.agree(&all, world.rank(), path)
}

/// With `SHOAL_TRACE`, measures this rank's clock offset to rank 0 (every
/// rank takes part) and starts the trace, so init itself is not traced.
fn start_trace(world: &Communicator) -> Result<()> {
    let engine = world.engine();
    agree_on_tracing(world, engine.config.trace_dir.is_some())?;
    let Some(dir) = &engine.config.trace_dir else {
        return Ok(());
    };
    let clock = measure_offset(world, &engine.tracing)?;
    engine.tracing.start(
        dir,
        engine.transport.rank(),
        engine.transport.world(),
        clock,
    )
}

/// Checks that every rank runs the same build of shoal (`agree::version`),
/// before anything else goes between them.
fn agree_on_build(world: &Communicator) -> Result<()> {
    let build = Build::this();
    if world.size() > 1 {
        let all = world.allgather_bytes(&build.record())?;
        version::compare(&all, world.members())?;
    }
    debug!("every rank runs {build}");
    Ok(())
}

/// Checks that every rank traces or none does: the clock measurement is
/// collective, so a rank without `SHOAL_TRACE` would leave rank 0 waiting for
/// its ping-pongs and the job would stop in a misleading "deadlock".
fn agree_on_tracing(world: &Communicator, on: bool) -> Result<()> {
    if world.size() == 1 {
        return Ok(());
    }
    let all = world.allgather_bytes(&[u8::from(on)])?;
    if all.iter().all(|&f| f == all[0]) {
        return Ok(());
    }
    let with: Vec<usize> = (0..all.len()).filter(|&r| all[r] == 1).collect();
    let without: Vec<usize> = (0..all.len()).filter(|&r| all[r] == 0).collect();
    Err(Error::invalid(format!(
        "SHOAL_TRACE is set on ranks {with:?} but not on ranks {without:?}: set it on every rank or on none"
    )))
}

/// Checks that every rank sets `SHOAL_ADAPT` and `SHOAL_ADAPT_BYTES` alike:
/// the calls they cover exchange their measurements, in call order, so a
/// rank whose calls did not would see its next call meet an exchange.
/// Also agrees whether some host runs more ranks than it has CPUs: then no
/// call adapts, on any rank. A call's time then does not measure what the
/// job gets done: each rank's calls return while others wait for a CPU.
/// 4 ranks on 2 vCPUs: the adapting 32 KiB broadcast flapped between
/// chains each epoch, measured at 5-11 us a call, and ran at 26-29 us a
/// call, against 18-23 without adapting (docs/benchmarks.md).
fn agree_on_adaptation(world: &Communicator) -> Result<()> {
    if world.size() == 1 {
        return Ok(());
    }
    let engine = world.engine();
    let config = &engine.config;
    let oversubscribed =
        shoal_transport::shm::oversubscribed(engine.local_ranks.len(), config.host_cpus);
    let mut mine = [0u8; 10];
    mine[0] = config.adapt as u8;
    mine[1..9].copy_from_slice(&(config.adapt_bytes as u64).to_le_bytes());
    mine[9] = u8::from(oversubscribed);
    let all = world.allgather_bytes(&mine)?;
    let anywhere = all.chunks_exact(mine.len()).any(|r| r[9] == 1);
    engine
        .oversubscribed_somewhere
        .store(anywhere, Ordering::Relaxed);
    let settings = agree::groups(&all, mine.len(), |r| &r[..9]);
    if settings.len() == 1 {
        return Ok(());
    }
    let each: Vec<String> = settings
        .iter()
        .map(|(r, ranks)| {
            let mode = AdaptMode::ALL[usize::from(r[0])].name();
            let bytes = u64::from_le_bytes(r[1..9].try_into().unwrap());
            let on = agree::ranks_text(ranks, world.members());
            format!("SHOAL_ADAPT={mode} SHOAL_ADAPT_BYTES={bytes} on {on}")
        })
        .collect();
    Err(Error::invalid(format!(
        "SHOAL_ADAPT or SHOAL_ADAPT_BYTES differ between ranks ({}): set them alike on every rank",
        each.join("; ")
    )))
}

/// Where the cost figures come from when they are not measured.
fn unmeasured_cost_source(config: &Config, world: usize) -> &'static str {
    if !config.cost.trim().is_empty() {
        "SHOAL_COST"
    } else if !config.calibrate {
        "built in: SHOAL_CALIBRATE=0"
    } else if world == 1 {
        "built in: one rank"
    } else {
        "measured"
    }
}

/// Rank 0 measures the network against the first rank on another host and
/// shared memory against the first other rank on its own host.
fn calibration_partners(rdzv: &Rendezvous) -> Partners {
    let hosts = &rdzv.hosts.host_of;
    Partners {
        remote: (1..hosts.len()).find(|&r| hosts[r] != hosts[0]),
        local: (1..hosts.len()).find(|&r| hosts[r] == hosts[0]),
    }
}

/// Shared memory to the ranks of this host (unless TCP is forced), TCP to
/// the rest, whose connections prove the job's transport key on both ends.
fn build_transport(config: &Config, rdzv: &Rendezvous) -> Result<Routed> {
    let (rank, world) = (rdzv.info.rank, rdzv.info.world_size);
    let job = segment_name(rdzv)?;
    let key = rdzv.secret.key.derive("transport");
    let local_ranks = rdzv.hosts.local_ranks.clone();
    let mut cfg = RoutedConfig::new(rank, world, local_ranks, &job, key);
    cfg.use_shm = !matches!(
        config.transport,
        TransportChoice::Tcp | TransportChoice::Ucx
    );
    cfg.net = if uses_ucx(config) { Net::Ucx } else { Net::Tcp };
    cfg.ucx_lib = config.ucx_lib.clone();
    cfg.ring_size = config.shm_ring_bytes;
    cfg.cma_threshold = config.shm_cma_bytes;
    cfg.cma_min_call = config.shm_cma_call_bytes;
    cfg.split_bytes = config.shm_split_bytes;
    cfg.slot_size = config.shm_slot_bytes;
    cfg.wait = config.wait;
    cfg.cpus = config.host_cpus;
    cfg.unexpected_bytes = config.unexpected_bytes;
    cfg.shm_run_ahead = config.shm_ahead_bytes;
    cfg.timeout = config.timeout;
    cfg.tcp_congestion = config.tcp_congestion.clone();
    if rdzv.hosts.num_hosts() > 1 || config.transport == TransportChoice::Tcp {
        cfg.bind_ip = tcp_address(config, rdzv)?;
    }
    Routed::connect(&cfg, &rdzv.store).map_err(|e| {
        if rdzv.server.is_some() {
            // The store lives in this process: serve it a moment longer, so
            // the ranks still checking the setup learn the cause from it
            // rather than from a vanished store.
            std::thread::sleep(STORE_GRACE.min(config.timeout));
        }
        Error::runtime(format!("transport setup on rank {rank}: {e}"))
    })
}

/// Whether UCX carries some peers: every one (`SHOAL_TRANSPORT=ucx`) or,
/// under `auto`, those of other hosts (`SHOAL_REMOTE_TRANSPORT=ucx`).
fn uses_ucx(config: &Config) -> bool {
    config.transport == TransportChoice::Ucx
        || (config.transport == TransportChoice::Auto
            && config.remote_transport == RemoteChoice::Ucx)
}

/// Rank 0's account of the job at init (`SHOAL_LOG=info`): the version,
/// the placement, and how it reaches each class of peer.
fn report_setup(config: &Config, rdzv: &Rendezvous, transport: &Routed) {
    let hosts = &rdzv.hosts;
    info!(
        "shoal {}: {} ranks on {} host(s)",
        env!("CARGO_PKG_VERSION"),
        rdzv.info.world_size,
        hosts.num_hosts()
    );
    let local_peers: Vec<usize> = hosts
        .local_ranks
        .iter()
        .copied()
        .filter(|&r| r != 0)
        .collect();
    let remote_peers = rdzv.info.world_size - 1 - local_peers.len();
    let tcp = || {
        let cc = congestion_in_effect(config.tcp_congestion.as_ref())
            .unwrap_or_else(|e| format!("unknown ({e})"));
        format!("tcp, congestion control {cc}")
    };
    let ucx = || match transport.ucx_version() {
        Some((a, b, c)) => format!("ucx {a}.{b}.{c} (UCX_TLS picks the path)"),
        None => "ucx".to_string(),
    };
    let same_host = if local_peers.is_empty() {
        "none".to_string()
    } else if config.transport == TransportChoice::Tcp {
        format!("{} (SHOAL_TRANSPORT=tcp)", tcp())
    } else if config.transport == TransportChoice::Ucx {
        format!("{} (SHOAL_TRANSPORT=ucx)", ucx())
    } else {
        format!(
            "shm, {} KiB rings, {}",
            config.shm_ring_bytes >> 10,
            cma_summary(config, transport, &local_peers)
        )
    };
    info!(
        "transport to the {} other rank(s) on this host: {same_host}",
        local_peers.len()
    );
    let other_hosts = if remote_peers == 0 {
        "none".to_string()
    } else if uses_ucx(config) {
        ucx()
    } else {
        tcp()
    };
    info!("transport to the {remote_peers} rank(s) on other hosts: {other_hosts}");
}

/// Whether large shared-memory messages are read once from the sender
/// (cross-memory attach, which the kernel may refuse: Yama's ptrace_scope).
fn cma_summary(config: &Config, transport: &Routed, local_peers: &[usize]) -> String {
    if config.shm_cma_bytes == 0 {
        return "cross-memory attach off (SHOAL_SHM_CMA_BYTES=0): every message through the rings"
            .into();
    }
    let allowed = local_peers
        .iter()
        .filter(|&&p| transport.uses_cma(p))
        .count();
    format!(
        "messages from {} KiB of calls from {} KiB read once by cross-memory attach (allowed with {allowed} of {} peers{})",
        config.shm_cma_bytes >> 10,
        config.shm_cma_call_bytes >> 10,
        local_peers.len(),
        if allowed < local_peers.len() {
            "; the others go through the rings: see /proc/sys/kernel/yama/ptrace_scope"
        } else {
            ""
        }
    )
}

/// How long a rank that serves the store keeps it after its transport
/// setup failed.
const STORE_GRACE: Duration = Duration::from_secs(1);

/// A name for this job's shared-memory segments that no other job on the
/// host uses and no stranger can guess ahead: the store scope (job id and
/// init generation) and a random nonce drawn by rank 0, since two jobs
/// without a launcher-given id share the scope.
fn segment_name(rdzv: &Rendezvous) -> Result<String> {
    let key = "segment-nonce";
    let failed = |e: std::io::Error| Error::runtime(format!("rendezvous: {e}"));
    if rdzv.info.rank == 0 {
        let nonce = to_hex(&random_bytes::<8>().map_err(failed)?);
        rdzv.store.set(key, nonce.as_bytes()).map_err(failed)?;
    }
    let nonce = String::from_utf8_lossy(&rdzv.store.get(key).map_err(failed)?).into_owned();
    let scope = rdzv
        .store
        .prefix()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
    Ok(format!("{scope}-{nonce}"))
}

/// The address peers reach this rank at: `SHOAL_TCP_ADDR`, else loopback on
/// one host, else the local address of the route to the master.
fn tcp_address(config: &Config, rdzv: &Rendezvous) -> Result<IpAddr> {
    if let Some(addr) = &config.tcp_addr {
        return addr
            .parse()
            .map_err(|_| Error::invalid(format!("SHOAL_TCP_ADDR={addr:?} is not an IP address")));
    }
    if rdzv.hosts.num_hosts() == 1 {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let master = rdzv.info.store_addr.clone().or_else(|| {
        let host = rdzv.info.master_addr.clone()?;
        Some(format!("{host}:{}", rdzv.info.master_port.unwrap_or(29500)))
    });
    let route = master.and_then(|m| {
        // Connecting a UDP socket sends nothing; it only asks the kernel for the route.
        let sock = UdpSocket::bind("0.0.0.0:0").ok()?;
        sock.connect(m).ok()?;
        sock.local_addr().ok().map(|a| a.ip())
    });
    route.ok_or_else(|| {
        Error::invalid(
            "cannot tell which address other hosts reach this rank at: set SHOAL_TCP_ADDR",
        )
    })
}

/// Whether this rank may read every local peer's memory through the shm
/// transport (the shared-memory algorithms need it).
fn shared_memory_readable(transport: &dyn shoal_transport::Transport) -> bool {
    transport.shared().is_some_and(|w| w.can_read_all())
}

/// The clock measurement's messages (`trace::clock`) over the world's
/// point-to-point.
impl WordExchange for Communicator {
    fn rank(&self) -> usize {
        Communicator::rank(self)
    }
    fn size(&self) -> usize {
        Communicator::size(self)
    }
    fn send_word(&self, peer: usize, tag: u32, word: u64) -> Result<()> {
        let bytes = word.to_le_bytes();
        self.send(peer, tag, DType::U8, bytes.as_ptr(), bytes.len())
    }
    fn recv_word(&self, peer: usize, tag: u32) -> Result<u64> {
        let mut bytes = [0u8; 8];
        self.recv(peer, tag, DType::U8, bytes.as_mut_ptr(), bytes.len())?;
        Ok(u64::from_le_bytes(bytes))
    }
}
