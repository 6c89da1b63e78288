//! Runtime configuration from `SHOAL_*` environment variables. Every variable
//! shoal reads, here or elsewhere, is listed in [`VARIABLES`] and documented
//! with its default in docs/configuration.md (tests/test_config.py keeps the
//! three in step).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use shoal_plan::Collective;
use shoal_transport::doorbell::WaitPolicy;
use shoal_transport::Congestion;

use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::select::{parse_cost, Selector, SHM_COST};

/// One `SHOAL_*` environment variable, for `shoal info` and the docs check.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    pub name: &'static str,
    /// The value in effect when it is unset; empty when that is computed
    /// (the hostname, a launcher's id) or means "not set" (`meaning` says).
    pub default: &'static str,
    pub meaning: &'static str,
    /// Where it is read, for a reader of the code.
    pub read_in: &'static str,
}

const fn var(
    name: &'static str,
    default: &'static str,
    meaning: &'static str,
    read_in: &'static str,
) -> Variable {
    Variable {
        name,
        default,
        meaning,
        read_in,
    }
}

/// Every `SHOAL_*` variable shoal reads, in the order of docs/configuration.md.
pub const VARIABLES: &[Variable] = &[
    var(
        "SHOAL_TIMEOUT",
        "300",
        "seconds any wait may go without progress",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_TRANSPORT",
        "auto",
        "auto, shm, tcp or ucx",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_REMOTE_TRANSPORT",
        "tcp",
        "what auto uses between hosts: tcp or ucx",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_UCX_LIB",
        "libucp.so.0",
        "the UCP library the ucx transport loads",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_ALGO",
        "",
        "per-collective algorithm overrides, e.g. allreduce:ring",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_ALGORITHMS",
        "",
        "Python files or modules of shoal.algo algorithms loaded when shoal is imported",
        "python algo/_load.py",
    ),
    var(
        "SHOAL_CALIBRATE",
        "1",
        "measure latency and bandwidth at init",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_COST",
        "",
        "cost-model figures instead of measured ones",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_TUNE_FILE",
        "",
        "tuning table (shoal tune) consulted before the built-in one",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_TUNE_BUILTIN",
        "1",
        "consult the built-in tuning table before the cost model",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_CHUNK_BYTES",
        "1048576",
        "piece size of chunked algorithms",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_SHM_RING_BYTES",
        "4194304",
        "shared-memory ring per ordered pair of local ranks",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_PLAN_CACHE",
        "256",
        "compiled plans a process keeps",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_SHM_CMA_BYTES",
        "1048576",
        "shared-memory messages this large are read from the sender (0: never)",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_SHM_SPLIT_BYTES",
        "1048576",
        "... and those this large are split: the sender writes half (0: never)",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_SHM_CMA_CALL_BYTES",
        "8388608",
        "... in calls this large (smaller ones' data is likely in cache)",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_SHM_SLOT_BYTES",
        "16384",
        "per-rank shared slot for small shared-memory collectives (0: off)",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_HOST_CPUS",
        "",
        "logical CPUs this host's ranks share: the machine class of tuning rows, and whether the ranks fit their cores (default: the CPUs this process may use; `shoal run` sets it when it binds each rank to its share of the cores)",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_WAIT",
        "auto",
        "how shared-memory waits spin: busily for 5 us then yielding while the host's ranks fit its cores (auto), yielding (yield), or busily (spin)",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_UNEXPECTED_BYTES",
        "16777216",
        "bytes of one peer's messages a rank holds before their receives are posted (flow control)",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_SHM_AHEAD_BYTES",
        "2097152",
        "... of which collective messages to a peer on the host may take (run-ahead)",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_ADAPT",
        "exact",
        "which automatic choices follow the speeds measured while a job runs: calls whose results keep their bits whatever the algorithm (exact), every reduction too (all), none (off)",
        "shoal-core config.rs, comm/adapt.rs",
    ),
    var(
        "SHOAL_ADAPT_BYTES",
        "16384",
        "... for calls whose per-rank block is at least this large",
        "shoal-core config.rs, comm/adapt.rs",
    ),
    var(
        "SHOAL_HOST_ID",
        "",
        "ranks with equal ids share memory (default: the hostname)",
        "shoal-core config.rs, shoal-bootstrap rendezvous/",
    ),
    var(
        "SHOAL_TCP_CC",
        "cubic",
        "TCP congestion control, or system",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_TCP_ADDR",
        "",
        "IP address this rank listens on for TCP peers",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_JOB_ID",
        "",
        "scopes store keys and segments (default: from the launcher)",
        "shoal-bootstrap rendezvous/",
    ),
    var(
        "SHOAL_STORE_ADDR",
        "",
        "host:port of a standalone store",
        "shoal-bootstrap rendezvous/",
    ),
    var(
        "SHOAL_STORE_PATH",
        "",
        "shared directory used as the store",
        "shoal-bootstrap rendezvous/",
    ),
    var(
        "SHOAL_STORE_MAX_VALUE",
        "67108864",
        "largest value a rank may store in rank 0's store",
        "shoal-bootstrap rendezvous/",
    ),
    var(
        "SHOAL_SECRET",
        "",
        "the job secret (shoal run sets one)",
        "shoal-bootstrap secret.rs, python launcher.py",
    ),
    var(
        "SHOAL_SECRET_FILE",
        "",
        "file holding the job secret (default ~/.config/shoal/secret)",
        "shoal-bootstrap secret.rs, python launcher.py",
    ),
    var(
        "SHOAL_SWITCH",
        "",
        "aggregation trees: root[/leaf=ranks...][,...]",
        "shoal-ina client, python bench",
    ),
    var(
        "SHOAL_SWITCH_SECRET",
        "",
        "the switch secret",
        "shoal-core ina.rs",
    ),
    var(
        "SHOAL_SWITCH_SECRET_FILE",
        "",
        "file holding the switch secret",
        "shoal-core ina.rs",
    ),
    var(
        "SHOAL_INA_TIMEOUT",
        "10",
        "seconds without switch results before it counts as dead",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_INA_INT32",
        "0",
        "send float32 as int32 to integer-only switches",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_INA_PAYLOAD",
        "1472",
        "largest UDP payload a worker sends",
        "shoal-core config.rs",
    ),
    var(
        "SHOAL_INA_RETRY_CALLS",
        "8",
        "allreduce calls on host algorithms before a failed switch is tried again (0: never)",
        "shoal-core ina.rs",
    ),
    var(
        "SHOAL_INA_RETRY_MAX_CALLS",
        "1024",
        "longest back-off before retrying the switch, in allreduce calls",
        "shoal-core ina.rs",
    ),
    var(
        "SHOAL_LOG",
        "warn",
        "which log records the Rust code makes (tracing filter); the switch daemon defaults to info",
        "shoal-core log/",
    ),
    var(
        "SHOAL_LOG_FILE",
        "",
        "file the log lines are appended to instead of stderr; %r becomes the rank",
        "shoal-core log/",
    ),
    var(
        "SHOAL_TRACE",
        "",
        "directory every rank writes its trace of executed steps to (rank-<r>.json)",
        "shoal-core config.rs, trace/",
    ),
    var(
        "SHOAL_FLIGHT_RECORDER",
        "64",
        "calls per rank kept to dump with an error (0: off)",
        "shoal-core config.rs, trace/",
    ),
    var(
        "SHOAL_TESTBED_NAME",
        "shoal",
        "testbed name of shoal testbed commands without --name",
        "python testbed/state.py",
    ),
    var(
        "SHOAL_TESTBED_DIR",
        "/run/shoal-testbed",
        "directory of testbed state files",
        "python testbed/state.py",
    ),
    var(
        "SHOAL_TORCH_CUDA_PIPELINE",
        "1",
        "flag: CUDA tensors take the torch backend's chunked, event-completed pipeline (0: the host path)",
        "python torch/_cuda.py",
    ),
    var(
        "SHOAL_TORCH_CUDA_CHUNK_BYTES",
        "4194304",
        "chunk size of the torch backend's CUDA pipeline (all_reduce, broadcast, reduce)",
        "python torch/_cuda.py",
    ),
    var(
        "SHOAL_TORCH_CUDA_ALGO",
        "",
        "host algorithm of the CUDA pipeline's all_reduce chunks (empty: shm_sharded from 1 MiB on one host; auto: the selector)",
        "python torch/_cuda.py",
    ),
    var(
        "SHOAL_TORCH_STAGING_BYTES",
        "268435456",
        "pinned host staging the torch backend keeps per CUDA device",
        "python torch/_staging.py",
    ),
];

/// Which transport connects the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportChoice {
    /// Shared memory between ranks of one host, TCP between hosts.
    Auto,
    /// Shared memory only (every rank must be on one host).
    Shm,
    /// TCP for every pair, also on one host.
    Tcp,
    /// UCX for every pair (UCX picks shared memory, TCP, InfiniBand... per `UCX_TLS`).
    Ucx,
}

/// What carries the ranks of other hosts under `SHOAL_TRANSPORT=auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteChoice {
    Tcp,
    Ucx,
}

/// Which automatic choices follow the speeds measured while a job runs
/// (`SHOAL_ADAPT`, see `comm/adapt.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdaptMode {
    /// None: every call of a shape runs the algorithm chosen at its first.
    Off,
    /// The calls whose results are the same bit for bit whichever algorithm
    /// runs them: the collectives that only copy data, and reductions whose
    /// arithmetic gives the same bits in any order
    /// ([`ReduceOp::same_bits_in_any_order`]).
    Exact,
    /// Every reduction too, whose rounding may then change from call to call.
    All,
}

impl AdaptMode {
    /// Every mode, indexed by its discriminant (`mode as u8`).
    pub const ALL: [AdaptMode; 3] = [AdaptMode::Off, AdaptMode::Exact, AdaptMode::All];

    /// Its `SHOAL_ADAPT` value.
    pub fn name(self) -> &'static str {
        match self {
            AdaptMode::Off => "off",
            AdaptMode::Exact => "exact",
            AdaptMode::All => "all",
        }
    }

    /// Whether calls of `collective` over `dtype` on `ranks` ranks may
    /// change algorithm as they run (`op` is `Sum` where it does not reduce).
    pub fn covers(self, collective: Collective, dtype: DType, op: ReduceOp, ranks: usize) -> bool {
        match self {
            AdaptMode::Off => false,
            AdaptMode::Exact => !collective.reduces() || op.same_bits_in_any_order(dtype, ranks),
            AdaptMode::All => true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    /// `SHOAL_TIMEOUT` (seconds, default 300, at most a year): longest time any wait may make no progress.
    pub timeout: Duration,
    /// `SHOAL_TRANSPORT` (auto | shm | tcp | ucx, default auto).
    pub transport: TransportChoice,
    /// `SHOAL_REMOTE_TRANSPORT` (tcp | ucx, default tcp): what `auto`
    /// uses between hosts (shared memory stays within a host).
    pub remote_transport: RemoteChoice,
    /// `SHOAL_UCX_LIB` (default libucp.so.0): the UCP library loaded when a
    /// transport uses UCX.
    pub ucx_lib: String,
    /// `SHOAL_ALGO` (default empty): per-collective algorithm overrides, `allreduce:ring,broadcast:pc`.
    pub algo: String,
    /// `SHOAL_CHUNK_BYTES` (default 1048576, at least 64): pipelining piece size of chunked algorithms.
    pub chunk_bytes: usize,
    /// `SHOAL_SHM_RING_BYTES` (default 4194304, 4096 to 1 GiB): ring buffer per ordered pair of local ranks.
    pub shm_ring_bytes: usize,
    /// `SHOAL_SHM_CMA_BYTES` (default 1048576): shared-memory messages this
    /// large are read once from the sender's memory (0: always through the ring).
    pub shm_cma_bytes: usize,
    /// `SHOAL_SHM_SPLIT_BYTES` (default 1048576): of those, messages this
    /// large are split, the sender writing the second half into the
    /// receiver while the receiver reads the first (0: never).
    pub shm_split_bytes: usize,
    /// `SHOAL_SHM_CMA_CALL_BYTES` (default 8388608): ... in calls whose
    /// buffers are this large (0: in every call).
    pub shm_cma_call_bytes: usize,
    /// `SHOAL_SHM_SLOT_BYTES` (default 16384, at most 1 MiB): each of a rank's two
    /// shared slot buffers; shared-memory collective steps exposing this
    /// little are copied there and read with plain loads (0: never).
    pub shm_slot_bytes: usize,
    /// `SHOAL_WAIT` (default `auto`): whether shared-memory waits spin
    /// busily for their first microseconds while the host's ranks fit its
    /// cores, yield, or spin busily throughout.
    pub wait: WaitPolicy,
    /// `SHOAL_HOST_CPUS` (default: the CPUs this process may use, 1 to
    /// 1048576): the logical CPUs this host's ranks share. A launcher that
    /// binds each rank to a share of the cores sets it, since a bound rank
    /// sees only its own share.
    pub host_cpus: usize,
    /// `SHOAL_UNEXPECTED_BYTES` (default 16777216, 65536 to 1 TiB): the
    /// flow-control window: bytes of one peer's messages a rank holds
    /// before their receives are posted; beyond it the sender's messages
    /// wait for their receives (rendezvous).
    pub unexpected_bytes: usize,
    /// `SHOAL_SHM_AHEAD_BYTES` (default 2097152, 65536 to 1 TiB): of that
    /// window, how much collective messages to a peer on the same host may
    /// take; later ones wait for their receives, so a broadcast's root
    /// runs no further ahead of its receivers than this.
    pub shm_ahead_bytes: usize,
    /// `SHOAL_ADAPT` (default `exact`): which collectives' automatic
    /// choices follow the speeds measured while the job runs (`comm/adapt.rs`).
    pub adapt: AdaptMode,
    /// `SHOAL_ADAPT_BYTES` (default 16384): ... in calls whose per-rank
    /// block is at least this large.
    pub adapt_bytes: usize,
    /// `SHOAL_HOST_ID` (default: the hostname): ranks with equal ids share memory.
    pub host_id: Option<String>,
    /// `SHOAL_TCP_ADDR` (default: the address that reaches the store, else 127.0.0.1):
    /// the IP address this rank listens on for TCP peers.
    pub tcp_addr: Option<String>,
    /// `SHOAL_TCP_CC` (default cubic): congestion control of shoal's TCP
    /// connections; `system` keeps the kernel's default. Cubic by default
    /// because BBR's pacing stalls collective traffic (see docs/configuration.md).
    pub tcp_congestion: Option<Congestion>,
    /// `SHOAL_CALIBRATE` (a flag, default on): measure latency and bandwidth at init.
    pub calibrate: bool,
    /// `SHOAL_COST` (default empty): cost parameters given instead of measured,
    /// `alpha=<s>,beta=<s/byte>,gamma=<s/byte>`.
    pub cost: String,
    /// `SHOAL_TUNE_FILE` (default none): a tuning table (docs/tuning.md)
    /// whose rows the selector follows before the built-in table's.
    pub tune_file: Option<String>,
    /// `SHOAL_TUNE_BUILTIN` (a flag, default on): consult the built-in
    /// table after `SHOAL_TUNE_FILE`'s; off, the cost model comes next.
    pub tune_builtin: bool,
    /// `SHOAL_PLAN_CACHE` (default 256, 1 to 65536): how many compiled plans
    /// a process keeps; the least recently used one goes first.
    pub plan_cache: usize,
    /// `SHOAL_INA_*`: how this rank talks to aggregation switches. Read
    /// whether or not `SHOAL_SWITCH` is set, so a typo fails at once rather
    /// than on the day a switch appears.
    pub ina: InaSettings,
    /// `SHOAL_TRACE` (default unset): the directory each rank writes its
    /// trace to (see docs/tracing.md).
    pub trace_dir: Option<PathBuf>,
    /// `SHOAL_FLIGHT_RECORDER` (default 64, 0 to 65536): how many recent
    /// calls each rank keeps to dump with an error (0: none).
    pub flight_recorder: usize,
}

/// The settings of the in-network aggregation client.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InaSettings {
    /// `SHOAL_INA_TIMEOUT` (seconds, default 10, at most a day): no result
    /// from the switch for this long while packets are outstanding and it
    /// counts as dead.
    pub timeout: Duration,
    /// `SHOAL_INA_INT32` (a flag, default off): float32 travels as int32
    /// with a per-packet exponent, for switches that only add integers.
    pub int32: bool,
    /// `SHOAL_INA_PAYLOAD` (bytes, default 1472, 64 to 65507): largest UDP
    /// payload a worker sends.
    pub payload: usize,
    /// `SHOAL_INA_RETRY_CALLS` (default 8, 0 = never): after the switch
    /// failed, allreduce calls it could have run before it is tried again.
    pub retry_calls: u64,
    /// `SHOAL_INA_RETRY_MAX_CALLS` (default 1024): the back-off doubles
    /// after each failed retry, up to this many calls.
    pub retry_max_calls: u64,
}

impl InaSettings {
    /// Sets the client fields these settings control.
    pub fn apply(&self, cfg: &mut shoal_ina::InaConfig) {
        cfg.dead_timeout = self.timeout;
        cfg.f32_as_int32 = self.int32;
        cfg.payload_budget = self.payload;
    }
}

/// The longest `SHOAL_TIMEOUT`: a year. Longer is a typo, and every deadline
/// (now + timeout) must stay representable.
const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;
/// Rings beyond this only use up `/dev/shm` (there is one per ordered pair of local ranks).
const MAX_RING_BYTES: usize = 1 << 30;
/// Chunks beyond this are no different from one piece, and keep plan arithmetic far from overflow.
const MAX_CHUNK_BYTES: usize = 1 << 40;
const MAX_PLAN_CACHE: usize = 65_536;
/// A count no host reaches (Linux's own limit on CPUs is 8192 by default).
const MAX_HOST_CPUS: usize = 1 << 20;
/// A smaller flow-control window only sends more messages by rendezvous.
const MIN_UNEXPECTED_BYTES: usize = 65_536;
/// More calls than anyone reads in a dump.
const MAX_FLIGHT_RECORDER: usize = 65_536;
/// The longest `SHOAL_INA_TIMEOUT` (a day): longer is a typo, and would not
/// fit the client's clock arithmetic.
const MAX_INA_TIMEOUT_SECS: f64 = 86_400.0;
/// A UDP payload fits one IPv4 datagram (65535 - 20 - 8); below 64 bytes no
/// packet holds a useful number of elements.
const MIN_INA_PAYLOAD: usize = 64;
const MAX_INA_PAYLOAD: usize = 65_507;
/// A back-off of a billion calls is never: longer is a typo.
const MAX_INA_RETRY_CALLS: usize = 1_000_000_000;

impl Config {
    /// Reads the configuration through `env` (injected so tests are hermetic).
    /// Every value is checked here, so a bad one fails `init` before any
    /// rendezvous, with an error naming the variable and the value.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
        let algo = env("SHOAL_ALGO").unwrap_or_default();
        // Parsed again at init; checked here so that it fails before the rendezvous.
        Selector::new(&algo, SHM_COST)
            .map_err(|e| Error::invalid(format!("SHOAL_ALGO={algo:?}: {}", e.message)))?;
        let cost = env("SHOAL_COST").unwrap_or_default();
        parse_cost(&cost, SHM_COST)?;
        let tune_file = env("SHOAL_TUNE_FILE").filter(|s| !s.trim().is_empty());
        // Loaded again at init; read here so a bad table fails before the rendezvous.
        if let Some(path) = &tune_file {
            crate::tune::load_file(std::path::Path::new(path))?;
        }
        Ok(Config {
            tune_file,
            tune_builtin: flag(env, "SHOAL_TUNE_BUILTIN", true)?,
            timeout: seconds(env, "SHOAL_TIMEOUT", 300.0, MAX_TIMEOUT_SECS, "a year")?,
            transport: parse_transport(env)?,
            remote_transport: parse_remote_transport(env)?,
            ucx_lib: value(env, "SHOAL_UCX_LIB").unwrap_or_else(|| "libucp.so.0".to_string()),
            algo,
            chunk_bytes: whole(env, "SHOAL_CHUNK_BYTES", 1_048_576, 64, MAX_CHUNK_BYTES)?,
            shm_ring_bytes: whole(env, "SHOAL_SHM_RING_BYTES", 4_194_304, 4096, MAX_RING_BYTES)?,
            shm_cma_bytes: whole(env, "SHOAL_SHM_CMA_BYTES", 1_048_576, 0, usize::MAX)?,
            shm_split_bytes: whole(
                env,
                "SHOAL_SHM_SPLIT_BYTES",
                shoal_transport::shm::DEFAULT_SPLIT_BYTES,
                0,
                usize::MAX,
            )?,
            shm_cma_call_bytes: whole(env, "SHOAL_SHM_CMA_CALL_BYTES", 8_388_608, 0, usize::MAX)?,
            shm_slot_bytes: whole(env, "SHOAL_SHM_SLOT_BYTES", 16_384, 0, 1 << 20)?,
            wait: parse_wait(env)?,
            host_cpus: host_cpus(env)?,
            unexpected_bytes: whole(
                env,
                "SHOAL_UNEXPECTED_BYTES",
                shoal_transport::flow::DEFAULT_WINDOW,
                MIN_UNEXPECTED_BYTES,
                1 << 40,
            )?,
            shm_ahead_bytes: whole(
                env,
                "SHOAL_SHM_AHEAD_BYTES",
                shoal_transport::shm::DEFAULT_RUN_AHEAD,
                MIN_UNEXPECTED_BYTES,
                1 << 40,
            )?,
            adapt: parse_adapt(env)?,
            adapt_bytes: whole(env, "SHOAL_ADAPT_BYTES", 16_384, 0, usize::MAX)?,
            host_id: env("SHOAL_HOST_ID").filter(|s| !s.is_empty()),
            tcp_addr: parse_tcp_addr(env)?,
            tcp_congestion: parse_congestion(env)?,
            calibrate: flag(env, "SHOAL_CALIBRATE", true)?,
            cost,
            plan_cache: whole(env, "SHOAL_PLAN_CACHE", 256, 1, MAX_PLAN_CACHE)?,
            trace_dir: value(env, "SHOAL_TRACE").map(PathBuf::from),
            flight_recorder: whole(env, "SHOAL_FLIGHT_RECORDER", 64, 0, MAX_FLIGHT_RECORDER)?,
            ina: InaSettings {
                timeout: seconds(
                    env,
                    "SHOAL_INA_TIMEOUT",
                    10.0,
                    MAX_INA_TIMEOUT_SECS,
                    "a day",
                )?,
                int32: flag(env, "SHOAL_INA_INT32", false)?,
                payload: whole(
                    env,
                    "SHOAL_INA_PAYLOAD",
                    1472,
                    MIN_INA_PAYLOAD,
                    MAX_INA_PAYLOAD,
                )?,
                retry_calls: whole(env, "SHOAL_INA_RETRY_CALLS", 8, 0, MAX_INA_RETRY_CALLS)? as u64,
                retry_max_calls: whole(
                    env,
                    "SHOAL_INA_RETRY_MAX_CALLS",
                    1024,
                    1,
                    MAX_INA_RETRY_CALLS,
                )? as u64,
            },
        })
    }

    /// The configuration of this process's environment.
    pub fn from_process_env() -> Result<Config> {
        Config::from_env(&|k| std::env::var(k).ok())
    }
}

/// The value of `key`, trimmed; `None` when unset or blank (the default applies).
fn value(env: &dyn Fn(&str) -> Option<String>, key: &str) -> Option<String> {
    env(key)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `KEY="value" must be <what>`, for errors.
fn must_be(env: &dyn Fn(&str) -> Option<String>, key: &str, what: &str) -> String {
    format!("{key}={:?} must be {what}", env(key).unwrap_or_default())
}

// The parsing rules every SHOAL_* setting follows: unset or blank means the
// default, anything else must parse and lie in range, or it is an error that
// names the variable, the value and what it must be. Nothing is clamped.

/// A flag: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (any case).
fn flag(env: &dyn Fn(&str) -> Option<String>, key: &str, default: bool) -> Result<bool> {
    let Some(v) = value(env, key) else {
        return Ok(default);
    };
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Error::invalid(must_be(
            env,
            key,
            "0 or 1 (or false/true, no/yes, off/on)",
        ))),
    }
}

/// A whole number in `min..=max`, or `default` when unset.
fn whole(
    env: &dyn Fn(&str) -> Option<String>,
    key: &str,
    default: usize,
    min: usize,
    max: usize,
) -> Result<usize> {
    let Some(v) = value(env, key) else {
        return Ok(default);
    };
    let range = if max == usize::MAX {
        format!("at least {min}")
    } else {
        format!("{min} to {max}")
    };
    let n: usize = v.parse().map_err(|_| {
        Error::invalid(must_be(
            env,
            key,
            &format!("a whole number, {range} (default {default})"),
        ))
    })?;
    if n < min {
        return Err(Error::invalid(must_be(
            env,
            key,
            &format!("at least {min} ({range})"),
        )));
    }
    if n > max {
        return Err(Error::invalid(must_be(
            env,
            key,
            &format!("at most {max} ({range})"),
        )));
    }
    Ok(n)
}

/// Seconds, positive and at most `max` (`max_words` says it in words):
/// `Duration` cannot hold NaN, negative or unbounded values (they used to
/// panic), 0 would fail every wait, and every deadline (now + it) must stay
/// representable.
fn seconds(
    env: &dyn Fn(&str) -> Option<String>,
    key: &str,
    default: f64,
    max: f64,
    max_words: &str,
) -> Result<Duration> {
    let Some(v) = value(env, key) else {
        return Ok(Duration::from_secs_f64(default));
    };
    let secs: f64 = v.parse().map_err(|_| {
        Error::invalid(must_be(
            env,
            key,
            &format!("a number of seconds (default {default})"),
        ))
    })?;
    if secs.is_nan() || secs <= 0.0 {
        return Err(Error::invalid(must_be(
            env,
            key,
            "a positive number of seconds",
        )));
    }
    if secs > max {
        return Err(Error::invalid(must_be(
            env,
            key,
            &format!("at most {max} seconds ({max_words})"),
        )));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_tcp_addr(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>> {
    let Some(v) = value(env, "SHOAL_TCP_ADDR") else {
        return Ok(None);
    };
    if v.parse::<IpAddr>().is_err() {
        return Err(Error::invalid(must_be(
            env,
            "SHOAL_TCP_ADDR",
            "an IP address (e.g. 10.0.0.5)",
        )));
    }
    Ok(Some(v))
}

/// `SHOAL_HOST_CPUS`, or the CPUs this process may use.
pub fn host_cpus(env: &dyn Fn(&str) -> Option<String>) -> Result<usize> {
    let own = shoal_transport::shm::process_cpus();
    whole(env, "SHOAL_HOST_CPUS", own, 1, MAX_HOST_CPUS)
}

/// The default only applies where the kernel has it; one the user names is required.
fn parse_wait(env: &dyn Fn(&str) -> Option<String>) -> Result<WaitPolicy> {
    match value(env, "SHOAL_WAIT") {
        None => Ok(WaitPolicy::default()),
        Some(v) => WaitPolicy::parse(&v)
            .ok_or_else(|| Error::invalid(must_be(env, "SHOAL_WAIT", "auto, spin or yield"))),
    }
}

fn parse_adapt(env: &dyn Fn(&str) -> Option<String>) -> Result<AdaptMode> {
    let Some(v) = value(env, "SHOAL_ADAPT") else {
        return Ok(AdaptMode::Exact);
    };
    // `copies`, the default's name when it left out every reduction.
    let v = match v.as_str() {
        "0" => "off",
        "copies" => "exact",
        v => v,
    };
    AdaptMode::ALL
        .into_iter()
        .find(|m| m.name() == v)
        .ok_or_else(|| Error::invalid(must_be(env, "SHOAL_ADAPT", "exact, all or off")))
}

fn parse_congestion(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Congestion>> {
    match value(env, "SHOAL_TCP_CC") {
        Some(v) if v == "system" => Ok(None),
        // The kernel's names (TCP_CA_NAME_MAX is 16 with the terminating 0).
        Some(v) if v.len() < 16 && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
            Ok(Some(Congestion {
                name: v,
                required: true,
            }))
        }
        Some(_) => Err(Error::invalid(must_be(
            env,
            "SHOAL_TCP_CC",
            "a congestion control name (e.g. cubic, bbr, reno) or system",
        ))),
        None => Ok(Some(Congestion {
            name: "cubic".into(),
            required: false,
        })),
    }
}

fn parse_transport(env: &dyn Fn(&str) -> Option<String>) -> Result<TransportChoice> {
    match value(env, "SHOAL_TRANSPORT").as_deref() {
        None | Some("auto") => Ok(TransportChoice::Auto),
        Some("shm") => Ok(TransportChoice::Shm),
        Some("tcp") => Ok(TransportChoice::Tcp),
        Some("ucx") => Ok(TransportChoice::Ucx),
        Some(other) => Err(Error::invalid(format!(
            "SHOAL_TRANSPORT={other:?} is not a transport; valid: auto, shm, tcp, ucx"
        ))),
    }
}

fn parse_remote_transport(env: &dyn Fn(&str) -> Option<String>) -> Result<RemoteChoice> {
    match value(env, "SHOAL_REMOTE_TRANSPORT").as_deref() {
        None | Some("tcp") => Ok(RemoteChoice::Tcp),
        Some("ucx") => Ok(RemoteChoice::Ucx),
        Some(other) => Err(Error::invalid(format!(
            "SHOAL_REMOTE_TRANSPORT={other:?} is not a transport between hosts; valid: tcp, ucx"
        ))),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An environment of fixed pairs (for the crate's tests).
    pub(crate) fn env_of(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults() {
        let c = Config::from_env(&env_of(&[])).unwrap();
        assert_eq!(c.timeout, Duration::from_secs(300));
        assert_eq!(c.transport, TransportChoice::Auto);
    }

    #[test]
    fn tcp_congestion_control() {
        fn cc(v: &'static [(&'static str, &'static str)]) -> Option<Congestion> {
            Config::from_env(&env_of(v)).unwrap().tcp_congestion
        }
        let default = cc(&[]).unwrap();
        assert_eq!((default.name.as_str(), default.required), ("cubic", false));
        let named = cc(&[("SHOAL_TCP_CC", "reno")]).unwrap();
        assert_eq!((named.name.as_str(), named.required), ("reno", true));
        assert!(cc(&[("SHOAL_TCP_CC", "system")]).is_none());
    }

    #[test]
    fn adapt_modes_are_listed_by_discriminant_and_named_as_parsed() {
        for mode in AdaptMode::ALL {
            assert_eq!(AdaptMode::ALL[mode as usize], mode);
            let name = mode.name();
            let env = move |k: &str| (k == "SHOAL_ADAPT").then(|| name.to_string());
            assert_eq!(Config::from_env(&env).unwrap().adapt, mode);
        }
        let off = Config::from_env(&env_of(&[("SHOAL_ADAPT", "0")])).unwrap();
        assert_eq!(off.adapt, AdaptMode::Off);
        assert_eq!(
            Config::from_env(&env_of(&[])).unwrap().adapt,
            AdaptMode::Exact
        );
        let copies = Config::from_env(&env_of(&[("SHOAL_ADAPT", "copies")])).unwrap();
        assert_eq!(copies.adapt, AdaptMode::Exact);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = Config::from_env(&env_of(&[("SHOAL_TIMEOUT", "soon")])).unwrap_err();
        assert!(e.message.contains("SHOAL_TIMEOUT"));
        let e = Config::from_env(&env_of(&[("SHOAL_TRANSPORT", "ib")])).unwrap_err();
        assert!(e.message.contains("auto, shm, tcp, ucx"));
    }

    #[test]
    fn nonsense_is_refused_not_clamped_or_panicked_on() {
        for (key, value, hint) in [
            ("SHOAL_TIMEOUT", "-1", "positive"),
            ("SHOAL_TIMEOUT", "0", "positive"),
            ("SHOAL_TIMEOUT", "nan", "positive"),
            ("SHOAL_TIMEOUT", "-inf", "positive"),
            ("SHOAL_TIMEOUT", "inf", "at most"),
            ("SHOAL_TIMEOUT", "1e300", "at most"),
            ("SHOAL_CHUNK_BYTES", "0", "at least 64"),
            (
                "SHOAL_CHUNK_BYTES",
                "99999999999999999",
                "64 to 1099511627776",
            ),
            ("SHOAL_CHUNK_BYTES", "1.5", "whole number"),
            ("SHOAL_SHM_RING_BYTES", "100", "at least 4096"),
            ("SHOAL_SHM_RING_BYTES", "99999999999", "at most"),
            ("SHOAL_SHM_CMA_BYTES", "-1", "whole number"),
            ("SHOAL_SHM_CMA_CALL_BYTES", "8M", "whole number"),
            ("SHOAL_SHM_SPLIT_BYTES", "1M", "whole number"),
            ("SHOAL_SHM_SLOT_BYTES", "2097152", "at most"),
            ("SHOAL_WAIT", "busy", "auto, spin or yield"),
            ("SHOAL_HOST_CPUS", "0", "at least 1"),
            ("SHOAL_HOST_CPUS", "two", "whole number"),
            ("SHOAL_ADAPT", "sometimes", "exact, all or off"),
            ("SHOAL_ADAPT_BYTES", "32K", "whole number"),
            ("SHOAL_UNEXPECTED_BYTES", "1000", "at least 65536"),
            ("SHOAL_SHM_AHEAD_BYTES", "2M", "whole number"),
            ("SHOAL_CALIBRATE", "2", "0 or 1"),
            ("SHOAL_CALIBRATE", "maybe", "0 or 1"),
            ("SHOAL_INA_TIMEOUT", "soon", "seconds"),
            ("SHOAL_INA_TIMEOUT", "inf", "at most 86400"),
            ("SHOAL_INA_TIMEOUT", "0", "positive"),
            ("SHOAL_INA_INT32", "2", "0 or 1"),
            ("SHOAL_INA_PAYLOAD", "big", "whole number, 64 to 65507"),
            ("SHOAL_INA_PAYLOAD", "9000000", "at most 65507"),
            ("SHOAL_INA_PAYLOAD", "10", "at least 64"),
            ("SHOAL_INA_RETRY_CALLS", "-1", "whole number"),
            ("SHOAL_INA_RETRY_CALLS", "2000000000", "at most 1000000000"),
            ("SHOAL_INA_RETRY_MAX_CALLS", "0", "at least 1"),
            ("SHOAL_TCP_ADDR", "host.example", "IP address"),
            ("SHOAL_TCP_CC", "bbr; rm", "congestion control"),
            ("SHOAL_COST", "alpha=nan", "alpha"),
            ("SHOAL_COST", "gamma=-1e-9", "gamma"),
            ("SHOAL_ALGO", "allreduce:fastest", "fastest"),
            ("SHOAL_PLAN_CACHE", "0", "at least 1"),
            ("SHOAL_PLAN_CACHE", "1000000", "at most 65536"),
        ] {
            let env = move |k: &str| (k == key).then(|| value.to_string());
            let e = Config::from_env(&env).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::InvalidArgument);
            for part in [key, value, hint] {
                assert!(e.message.contains(part), "{key}={value}: {}", e.message);
            }
        }
    }

    #[test]
    fn sensible_values_are_taken() {
        let c = Config::from_env(&env_of(&[
            ("SHOAL_TIMEOUT", " 0.25 "),
            ("SHOAL_CHUNK_BYTES", "64"),
            ("SHOAL_SHM_CMA_BYTES", "0"),
            ("SHOAL_SHM_CMA_CALL_BYTES", "0"),
            ("SHOAL_CALIBRATE", "0"),
            ("SHOAL_TCP_ADDR", "::1"),
            ("SHOAL_PLAN_CACHE", "1"),
        ]))
        .unwrap();
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!((c.chunk_bytes, c.shm_cma_bytes, c.plan_cache), (64, 0, 1));
        assert_eq!(c.shm_cma_call_bytes, 0);
        assert!(!c.calibrate);
        assert_eq!(c.tcp_addr.as_deref(), Some("::1"));
    }

    #[test]
    fn the_listed_defaults_are_the_defaults() {
        let unset = format!("{:?}", Config::from_env(&env_of(&[])).unwrap());
        // Naming cubic makes it required; the default falls back quietly.
        let fixed = |v: &&Variable| !v.default.is_empty() && v.name != "SHOAL_TCP_CC";
        for v in VARIABLES.iter().filter(fixed) {
            let env = |k: &str| (k == v.name).then(|| v.default.to_string());
            let set = format!("{:?}", Config::from_env(&env).unwrap());
            assert_eq!(set, unset, "{}={} is not its default", v.name, v.default);
        }
        let names: std::collections::HashSet<_> = VARIABLES.iter().map(|v| v.name).collect();
        assert_eq!(names.len(), VARIABLES.len(), "a variable is listed twice");
    }

    #[test]
    fn flags_take_the_usual_spellings() {
        fn calibrate(v: &'static str) -> bool {
            let env = move |k: &str| (k == "SHOAL_CALIBRATE").then(|| v.to_string());
            Config::from_env(&env).unwrap().calibrate
        }
        for on in ["1", "true", "TRUE", "yes", "on", " On "] {
            assert!(calibrate(on), "{on}");
        }
        for off in ["0", "false", "False", "no", "off"] {
            assert!(!calibrate(off), "{off}");
        }
        assert!(calibrate(""), "blank is the default");
    }

    #[test]
    fn ina_settings() {
        let d = Config::from_env(&env_of(&[])).unwrap().ina;
        let want = InaSettings {
            timeout: Duration::from_secs(10),
            int32: false,
            payload: 1472,
            retry_calls: 8,
            retry_max_calls: 1024,
        };
        assert_eq!(d, want);
        let c = Config::from_env(&env_of(&[
            ("SHOAL_INA_TIMEOUT", "0.5"),
            ("SHOAL_INA_INT32", "true"),
            ("SHOAL_INA_PAYLOAD", "9000"),
            ("SHOAL_INA_RETRY_CALLS", "0"),
            ("SHOAL_INA_RETRY_MAX_CALLS", "64"),
        ]))
        .unwrap()
        .ina;
        assert_eq!(
            (c.timeout, c.int32, c.payload),
            (Duration::from_millis(500), true, 9000)
        );
        assert_eq!((c.retry_calls, c.retry_max_calls), (0, 64));
    }
}
