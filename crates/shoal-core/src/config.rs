//! Runtime configuration from `SHOAL_*` environment variables. Every variable
//! is documented with its default in docs/configuration.md.

use std::net::IpAddr;
use std::time::Duration;

use shoal_transport::Congestion;

use crate::calibrate::parse_cost;
use crate::error::{Error, Result};
use crate::select::{Selector, SHM_COST};

/// Which transport connects the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportChoice {
    /// Shared memory between ranks of one host, TCP between hosts.
    Auto,
    /// Shared memory only (every rank must be on one host).
    Shm,
    /// TCP for every pair, also on one host.
    Tcp,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// `SHOAL_TIMEOUT` (seconds, default 300, at most a year): longest time any wait may make no progress.
    pub timeout: Duration,
    /// `SHOAL_TRANSPORT` (auto | shm | tcp, default auto).
    pub transport: TransportChoice,
    /// `SHOAL_ALGO` (default empty): per-collective algorithm overrides, `allreduce:ring,broadcast:pc`.
    pub algo: String,
    /// `SHOAL_CHUNK_BYTES` (default 1048576, at least 64): pipelining piece size of chunked algorithms.
    pub chunk_bytes: usize,
    /// `SHOAL_SHM_RING_BYTES` (default 4194304, 4096 to 1 GiB): ring buffer per ordered pair of local ranks.
    pub shm_ring_bytes: usize,
    /// `SHOAL_SHM_CMA_BYTES` (default 1048576): shared-memory messages this
    /// large are read once from the sender's memory (0: always through the ring).
    pub shm_cma_bytes: usize,
    /// `SHOAL_HOST_ID` (default: the hostname): ranks with equal ids share memory.
    pub host_id: Option<String>,
    /// `SHOAL_TCP_ADDR` (default: the address that reaches the store, else 127.0.0.1):
    /// the IP address this rank listens on for TCP peers.
    pub tcp_addr: Option<String>,
    /// `SHOAL_TCP_CC` (default cubic): congestion control of shoal's TCP
    /// connections; `system` keeps the kernel's default. Cubic by default
    /// because BBR's pacing stalls collective traffic (see docs/configuration.md).
    pub tcp_congestion: Option<Congestion>,
    /// `SHOAL_CALIBRATE` (0 or 1, default 1): measure latency and bandwidth at init.
    pub calibrate: bool,
    /// `SHOAL_COST` (default empty): cost parameters given instead of measured,
    /// `alpha=<s>,beta=<s/byte>,gamma=<s/byte>`.
    pub cost: String,
    /// `SHOAL_PLAN_CACHE` (default 256, 1 to 65536): how many compiled plans
    /// a process keeps; the least recently used one goes first.
    pub plan_cache: usize,
}

/// The longest `SHOAL_TIMEOUT`: a year. Longer is a typo, and every deadline
/// (now + timeout) must stay representable.
const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;
/// Rings beyond this only use up `/dev/shm` (there is one per ordered pair of local ranks).
const MAX_RING_BYTES: usize = 1 << 30;
/// Chunks beyond this are no different from one piece, and keep plan arithmetic far from overflow.
const MAX_CHUNK_BYTES: usize = 1 << 40;
const MAX_PLAN_CACHE: usize = 65_536;

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
        Ok(Config {
            timeout: parse_timeout(env)?,
            transport: parse_transport(env)?,
            algo,
            chunk_bytes: parse_in(env, "SHOAL_CHUNK_BYTES", 1_048_576, 64, MAX_CHUNK_BYTES)?,
            shm_ring_bytes: parse_in(env, "SHOAL_SHM_RING_BYTES", 4_194_304, 4096, MAX_RING_BYTES)?,
            shm_cma_bytes: parse_in(env, "SHOAL_SHM_CMA_BYTES", 1_048_576, 0, usize::MAX)?,
            host_id: env("SHOAL_HOST_ID").filter(|s| !s.is_empty()),
            tcp_addr: parse_tcp_addr(env)?,
            tcp_congestion: parse_congestion(env)?,
            calibrate: parse_in(env, "SHOAL_CALIBRATE", 1, 0, 1)
                .map_err(|_| Error::invalid(must_be(env, "SHOAL_CALIBRATE", "0 or 1")))?
                == 1,
            cost,
            plan_cache: parse_in(env, "SHOAL_PLAN_CACHE", 256, 1, MAX_PLAN_CACHE)?,
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

/// A whole number in `min..=max`, or `default` when unset.
fn parse_in(
    env: &dyn Fn(&str) -> Option<String>,
    key: &str,
    default: usize,
    min: usize,
    max: usize,
) -> Result<usize> {
    let Some(v) = value(env, key) else {
        return Ok(default);
    };
    let n: usize = v.parse().map_err(|_| {
        Error::invalid(must_be(
            env,
            key,
            &format!("a whole number (default {default})"),
        ))
    })?;
    if n < min {
        return Err(Error::invalid(must_be(
            env,
            key,
            &format!("at least {min}"),
        )));
    }
    if n > max {
        return Err(Error::invalid(must_be(env, key, &format!("at most {max}"))));
    }
    Ok(n)
}

/// Seconds, positive and finite: `Duration` cannot hold NaN, negative or
/// unbounded values (they used to panic), and 0 would fail every wait.
fn parse_timeout(env: &dyn Fn(&str) -> Option<String>) -> Result<Duration> {
    const KEY: &str = "SHOAL_TIMEOUT";
    let Some(v) = value(env, KEY) else {
        return Ok(Duration::from_secs(300));
    };
    let secs: f64 = v
        .parse()
        .map_err(|_| Error::invalid(must_be(env, KEY, "a number of seconds (default 300)")))?;
    if secs.is_nan() || secs <= 0.0 {
        return Err(Error::invalid(must_be(
            env,
            KEY,
            "a positive number of seconds",
        )));
    }
    if secs > MAX_TIMEOUT_SECS {
        return Err(Error::invalid(must_be(
            env,
            KEY,
            &format!("at most {MAX_TIMEOUT_SECS} seconds (a year)"),
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

/// The default only applies where the kernel has it; one the user names is required.
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
        Some(other) => Err(Error::invalid(format!(
            "SHOAL_TRANSPORT={other:?} is not a transport; valid: auto, shm, tcp"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
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
    fn bad_values_name_the_variable() {
        let e = Config::from_env(&env_of(&[("SHOAL_TIMEOUT", "soon")])).unwrap_err();
        assert!(e.message.contains("SHOAL_TIMEOUT"));
        let e = Config::from_env(&env_of(&[("SHOAL_TRANSPORT", "ib")])).unwrap_err();
        assert!(e.message.contains("auto, shm, tcp"));
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
            ("SHOAL_CHUNK_BYTES", "1.5", "whole number"),
            ("SHOAL_SHM_RING_BYTES", "100", "at least 4096"),
            ("SHOAL_SHM_RING_BYTES", "99999999999", "at most"),
            ("SHOAL_SHM_CMA_BYTES", "-1", "whole number"),
            ("SHOAL_CALIBRATE", "2", "0 or 1"),
            ("SHOAL_CALIBRATE", "yes", "0 or 1"),
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
            ("SHOAL_CALIBRATE", "0"),
            ("SHOAL_TCP_ADDR", "::1"),
            ("SHOAL_PLAN_CACHE", "1"),
        ]))
        .unwrap();
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!((c.chunk_bytes, c.shm_cma_bytes, c.plan_cache), (64, 0, 1));
        assert!(!c.calibrate);
        assert_eq!(c.tcp_addr.as_deref(), Some("::1"));
    }
}
