//! Runtime configuration from `SHOAL_*` environment variables. Every variable
//! is documented with its default in docs/configuration.md.

use shoal_transport::Congestion;
use std::time::Duration;

use crate::error::{Error, Result};

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
    /// `SHOAL_TIMEOUT` (seconds, default 300): longest time any wait may make no progress.
    pub timeout: Duration,
    /// `SHOAL_TRANSPORT` (auto | shm | tcp, default auto).
    pub transport: TransportChoice,
    /// `SHOAL_ALGO` (default empty): per-collective algorithm overrides, `allreduce:ring,broadcast:pc`.
    pub algo: String,
    /// `SHOAL_CHUNK_BYTES` (default 1048576): pipelining piece size of chunked algorithms.
    pub chunk_bytes: usize,
    /// `SHOAL_SHM_RING_BYTES` (default 4194304): ring buffer per ordered pair of local ranks.
    pub shm_ring_bytes: usize,
    /// `SHOAL_SHM_CMA_BYTES` (default 1048576): shared-memory messages this
    /// large are read once from the sender's memory (0: always through the ring).
    pub shm_cma_bytes: usize,
    /// `SHOAL_HOST_ID` (default: the hostname): ranks with equal ids share memory.
    pub host_id: Option<String>,
    /// `SHOAL_TCP_ADDR` (default: the address that reaches the store, else 127.0.0.1):
    /// the address this rank listens on for TCP peers.
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
}

impl Config {
    /// Reads the configuration through `env` (injected so tests are hermetic).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
        Ok(Config {
            timeout: Duration::from_secs_f64(parse(env, "SHOAL_TIMEOUT", 300.0)?),
            transport: parse_transport(env)?,
            algo: env("SHOAL_ALGO").unwrap_or_default(),
            chunk_bytes: parse(env, "SHOAL_CHUNK_BYTES", 1_048_576usize)?.max(64),
            shm_ring_bytes: parse(env, "SHOAL_SHM_RING_BYTES", 4_194_304usize)?.max(4096),
            shm_cma_bytes: parse(env, "SHOAL_SHM_CMA_BYTES", 1_048_576usize)?,
            host_id: env("SHOAL_HOST_ID").filter(|s| !s.is_empty()),
            tcp_addr: env("SHOAL_TCP_ADDR").filter(|s| !s.is_empty()),
            tcp_congestion: parse_congestion(env),
            calibrate: parse(env, "SHOAL_CALIBRATE", 1u8)? != 0,
            cost: env("SHOAL_COST").unwrap_or_default(),
        })
    }

    /// The configuration of this process's environment.
    pub fn from_process_env() -> Result<Config> {
        Config::from_env(&|k| std::env::var(k).ok())
    }
}

/// The default only applies where the kernel has it; one the user names is required.
fn parse_congestion(env: &dyn Fn(&str) -> Option<String>) -> Option<Congestion> {
    match env("SHOAL_TCP_CC").map(|v| v.trim().to_string()) {
        Some(v) if v == "system" => None,
        Some(v) if !v.is_empty() => Some(Congestion {
            name: v,
            required: true,
        }),
        _ => Some(Congestion {
            name: "cubic".into(),
            required: false,
        }),
    }
}

fn parse<T: std::str::FromStr>(
    env: &dyn Fn(&str) -> Option<String>,
    key: &str,
    default: T,
) -> Result<T> {
    match env(key).filter(|v| !v.trim().is_empty()) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| Error::invalid(format!("{key}={v:?} is not a valid number"))),
    }
}

fn parse_transport(env: &dyn Fn(&str) -> Option<String>) -> Result<TransportChoice> {
    match env("SHOAL_TRANSPORT").as_deref().map(str::trim) {
        None | Some("") | Some("auto") => Ok(TransportChoice::Auto),
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
}
