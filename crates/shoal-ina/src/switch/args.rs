//! Command-line flags of `shoal switch`. Every value is checked here, so a
//! nonsensical one is an error naming its flag rather than a switch that
//! starts and can serve no job.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use super::{SecretLoader, SwitchConfig};
use crate::proto::MAX_SLOTS;
use crate::switch::jobs::{slot_copy_bytes, MIN_SHARE_SLOTS};

pub const USAGE: &str = "usage: shoal switch [options]

  --listen ADDR         UDP data plane and TCP control address (default 0.0.0.0:9800)
  --secret-file PATH    the switch secret tenants must prove they hold (default:
                        SHOAL_SWITCH_SECRET, SHOAL_SWITCH_SECRET_FILE, else the
                        per-user secret file ~/.config/shoal/secret)
  --memory SIZE         aggregation memory shared by jobs, e.g. 64MiB (default 64MiB)
  --threads N           data-plane threads, each with its own UDP port and its
                        own jobs and 1/N of --memory (default: the number of cores)
  --metrics ADDR        serve Prometheus metrics over HTTP, e.g. :9801
  --parent HOST:PORT    UDP address of the parent switch (this one becomes a leaf)
  --payload BYTES       largest UDP payload (default 1472, a 1500-byte MTU)
  --max-jobs N          concurrent jobs (default 64)
  --max-slots N         largest slot pool / window per job (default 512, at most 32767)
  --max-conns-per-client N
                        authenticated control connections (= jobs) per client
                        address (default 32)
  --idle-timeout SECS   close an authenticated control connection that leases
                        no job after this long (default 10)
  --ecn-threshold F     memory fraction in use past which results carry ECN (default 0.8)
  --int-only            refuse float element types (emulates a switch ASIC)
  --drop-rate F         test knob: drop this fraction of received packets
  --seed N              seed of the drop knob (default 1)";

/// Largest `--max-jobs`: job ids and per-job tables stay small.
const MAX_JOBS: usize = 65536;
/// Most data-plane threads.
const MAX_THREADS: usize = 1024;
/// Longest `--idle-timeout` (a day).
const MAX_IDLE_SECS: f64 = 86400.0;

/// Parses `shoal switch` flags into a config; the secret comes from
/// `--secret-file` or, without it, from `load_secret`'s defaults.
pub fn parse_args(argv: &[String], load_secret: SecretLoader<'_>) -> Result<SwitchConfig, String> {
    let mut flags = Vec::new();
    let mut secret_file = None;
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        if flag == "--int-only" {
            flags.push((flag.clone(), String::new()));
            continue;
        }
        let (flag, value) = match flag.split_once('=') {
            Some((f, v)) => (f.to_string(), v.to_string()),
            None => {
                let v = it.next().ok_or(format!("{flag} needs a value"))?;
                (flag.clone(), v.clone())
            }
        };
        if flag == "--secret-file" {
            secret_file = Some(PathBuf::from(value));
        } else {
            flags.push((flag, value));
        }
    }
    let secret = load_secret(secret_file.as_deref()).map_err(|e| format!("switch secret: {e}"))?;
    let mut cfg = SwitchConfig::new(secret);
    for (flag, value) in &flags {
        apply(&mut cfg, flag, value)?;
    }
    check_memory(&cfg)?;
    Ok(cfg)
}

fn apply(cfg: &mut SwitchConfig, flag: &str, v: &str) -> Result<(), String> {
    let bad = |what: &str| format!("{flag}: {what}, got {v:?}");
    let int = |lo: usize, hi: usize| -> Result<usize, String> {
        v.parse::<usize>()
            .ok()
            .filter(|n| (lo..=hi).contains(n))
            .ok_or_else(|| bad(&format!("expected a whole number in {lo}..={hi}")))
    };
    let fraction = |lo_open: bool| -> Result<f64, String> {
        let r: f64 = v.parse().map_err(|_| bad("expected a number"))?;
        let ok = if lo_open { r > 0.0 } else { r >= 0.0 };
        if !(ok && r <= 1.0) {
            return Err(bad(if lo_open {
                "expected a fraction in (0, 1]"
            } else {
                "expected a fraction in [0, 1]"
            }));
        }
        Ok(r)
    };
    match flag {
        "--int-only" => cfg.int_only = true,
        "--listen" => {
            cfg.listen = addr(v)?;
            cfg.control = cfg.listen;
        }
        "--memory" => {
            cfg.memory = parse_size(v).ok_or_else(|| bad("expected a size such as 64MiB"))?;
        }
        "--metrics" => cfg.metrics = Some(addr(v)?),
        "--parent" => cfg.parent = Some(addr(v)?),
        "--threads" => cfg.threads = int(1, MAX_THREADS)?,
        "--payload" => cfg.payload_budget = int(64, 65507)?,
        "--max-jobs" => cfg.max_jobs = int(1, MAX_JOBS)?,
        "--max-slots" => cfg.max_slots = int(1, MAX_SLOTS as usize)? as u16,
        "--max-conns-per-client" => cfg.limits.max_per_client = int(1, MAX_JOBS)?,
        "--idle-timeout" => {
            let s: f64 = v.parse().map_err(|_| bad("expected seconds"))?;
            if !(s > 0.0 && s <= MAX_IDLE_SECS) {
                return Err(bad(&format!("expected seconds in (0, {MAX_IDLE_SECS}]")));
            }
            cfg.limits.idle_timeout = Duration::from_secs_f64(s);
        }
        "--ecn-threshold" => cfg.ecn_threshold = fraction(true)?,
        "--drop-rate" => {
            let r = fraction(false)?;
            if r == 1.0 {
                return Err(bad("a drop rate of 1 drops everything"));
            }
            cfg.drop_rate = r;
        }
        "--seed" => cfg.seed = v.parse().map_err(|_| bad("expected a whole number"))?,
        _ => return Err(format!("unknown option {flag}")),
    }
    Ok(())
}

/// Every thread's part of the memory must hold one job's minimum window
/// (two slots, each with its shadow copy) at the configured payload size.
fn check_memory(cfg: &SwitchConfig) -> Result<(), String> {
    let least = 2 * MIN_SHARE_SLOTS * slot_copy_bytes(cfg.payload_budget) * cfg.threads.max(1);
    if cfg.memory < least {
        return Err(format!(
            "--memory: {} bytes cannot hold one job per thread (at least {least} bytes with --payload {} and --threads {})",
            cfg.memory, cfg.payload_budget, cfg.threads
        ));
    }
    Ok(())
}

/// `:9801` means all interfaces; host names are resolved.
fn addr(v: &str) -> Result<SocketAddr, String> {
    let full = if v.starts_with(':') {
        format!("0.0.0.0{v}")
    } else {
        v.to_string()
    };
    full.to_socket_addrs()
        .map_err(|e| format!("address {v:?}: {e}"))?
        .next()
        .ok_or(format!("address {v:?} resolves to nothing"))
}

/// `65536`, `64KiB`, `64MiB`, `1GiB`, `64M`, `64MB` (all binary units).
pub fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: usize = num.parse().ok()?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    use shoal_bootstrap::auth::Key;
    use std::path::Path;

    fn parse(line: &str) -> Result<SwitchConfig, String> {
        let argv: Vec<String> = line.split(' ').map(String::from).collect();
        parse_args(&argv, &|file: Option<&Path>| {
            Ok(Key::from_material(
                file.map_or(b"default".as_slice(), |_| b"file"),
            ))
        })
    }

    #[test]
    fn flags() {
        let c = parse("--listen 127.0.0.1:9800 --memory 64MiB --metrics :9801 --drop-rate=0.01")
            .unwrap();
        assert_eq!(c.memory, 64 << 20);
        assert_eq!(c.metrics.unwrap().port(), 9801);
        assert_eq!(c.control, c.listen);
        assert!((c.drop_rate - 0.01).abs() < 1e-12);
        assert_eq!(c.secret, Key::from_material(b"default"));
        let c = parse("--secret-file /x --max-conns-per-client 3 --idle-timeout 0.5").unwrap();
        assert_eq!(c.secret, Key::from_material(b"file"));
        assert_eq!(c.limits.max_per_client, 3);
        assert_eq!(c.limits.idle_timeout, Duration::from_millis(500));
        assert!(parse("--bogus 1").is_err());
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("12x"), None);
        assert_eq!(parse("--threads 3").unwrap().threads, 3);
        assert_eq!(
            parse("--memory 1MiB").unwrap().threads,
            crate::switch::default_threads()
        );
    }

    #[test]
    fn nonsense_is_refused_naming_the_flag() {
        for line in [
            "--memory 0",
            "--memory 1KiB",
            "--memory 99999999999999999999GiB",
            "--max-jobs 0",
            "--threads 0",
            "--threads many",
            "--max-jobs -1",
            "--max-slots 0",
            "--max-slots 40000",
            "--ecn-threshold nan",
            "--ecn-threshold 0",
            "--ecn-threshold 1.5",
            "--drop-rate 1",
            "--drop-rate nan",
            "--payload 10",
            "--max-conns-per-client 0",
            "--idle-timeout inf",
            "--idle-timeout -1",
            "--idle-timeout nan",
        ] {
            let err = parse(line).unwrap_err();
            let flag = line.split(' ').next().unwrap();
            assert!(err.contains(flag), "{line}: {err}");
        }
    }

    #[test]
    fn a_secret_that_cannot_be_loaded_is_an_error() {
        let err = parse_args(&[], &|_: Option<&Path>| Err("no such file".into())).unwrap_err();
        assert!(
            err.contains("switch secret") && err.contains("no such file"),
            "{err}"
        );
    }
}
