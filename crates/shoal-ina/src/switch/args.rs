//! Command-line flags of `shoal switch`, parsed by clap. Every value is
//! checked here, so a nonsensical one is an error naming its flag rather
//! than a switch that starts and can serve no job.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command};

use super::{SecretLoader, SecretUnavailable, SwitchConfig};
use crate::proto::MAX_SLOTS;
use crate::switch::jobs::{slot_copy_bytes, MIN_SHARE_SLOTS};

/// Largest `--max-jobs`: job ids and per-job tables stay small.
const MAX_JOBS: usize = 65536;
/// Most data-plane threads.
const MAX_THREADS: usize = 1024;
/// Longest `--idle-timeout` (a day).
const MAX_IDLE_SECS: f64 = 86400.0;

/// The command line `shoal switch` takes; its help is `shoal switch --help`.
pub fn command() -> Command {
    let value = |name: &'static str, value_name: &'static str, help: &'static str| {
        Arg::new(name)
            .long(name)
            .value_name(value_name)
            .help(help)
            .action(ArgAction::Set)
            // `--max-jobs -1` is a bad value of --max-jobs, not a flag `-1`.
            .allow_negative_numbers(true)
    };
    Command::new("shoal switch")
        .about("The software in-network aggregation switch: sums the gradients of many jobs' allreduces.")
        .disable_version_flag(true)
        .arg(
            value("listen", "ADDR", "UDP data plane and TCP control address")
                .default_value("0.0.0.0:9800")
                .value_parser(addr),
        )
        .arg(
            value(
                "secret-file",
                "PATH",
                "the switch secret tenants must prove they hold [default: SHOAL_SWITCH_SECRET, \
                 SHOAL_SWITCH_SECRET_FILE, else the per-user secret file ~/.config/shoal/secret]",
            )
            .value_parser(clap::value_parser!(PathBuf)),
        )
        .arg(
            value("memory", "SIZE", "aggregation memory shared by jobs, e.g. 64MiB")
                .default_value("64MiB")
                .value_parser(size),
        )
        .arg(
            value(
                "threads",
                "N",
                "data-plane threads, each with its own UDP port and its own jobs and 1/N of \
                 --memory [default: the number of cores]",
            )
            .value_parser(whole(1, MAX_THREADS)),
        )
        .arg(
            value("metrics", "ADDR", "serve Prometheus metrics over HTTP, e.g. :9801")
                .value_parser(addr),
        )
        .arg(
            value("parent", "HOST:PORT", "UDP address of the parent switch (this one becomes a leaf)")
                .value_parser(addr),
        )
        .arg(
            value("payload", "BYTES", "largest UDP payload (1472: a 1500-byte MTU)")
                .default_value("1472")
                .value_parser(whole(64, 65507)),
        )
        .arg(
            value("max-jobs", "N", "concurrent jobs")
                .default_value("64")
                .value_parser(whole(1, MAX_JOBS)),
        )
        .arg(
            value("max-slots", "N", "largest slot pool / window per job")
                .default_value("512")
                .value_parser(whole(1, MAX_SLOTS as usize)),
        )
        .arg(
            value(
                "max-conns-per-client",
                "N",
                "authenticated control connections (= jobs) per client address",
            )
            .default_value("32")
            .value_parser(whole(1, MAX_JOBS)),
        )
        .arg(
            value(
                "idle-timeout",
                "SECS",
                "close an authenticated control connection that leases no job after this long",
            )
            .default_value("10")
            .value_parser(idle_seconds),
        )
        .arg(
            value(
                "ecn-threshold",
                "F",
                "memory fraction in use past which results carry ECN",
            )
            .default_value("0.8")
            .value_parser(|v: &str| fraction(v, Open::Above0)),
        )
        .arg(
            Arg::new("int-only")
                .long("int-only")
                .help("refuse float element types (emulates a switch ASIC)")
                .action(ArgAction::SetTrue),
        )
        .arg(
            value("drop-rate", "F", "test knob: drop this fraction of received packets")
                .default_value("0")
                .value_parser(|v: &str| fraction(v, Open::Below1)),
        )
        .arg(
            value("seed", "N", "seed of the drop knob")
                .default_value("1")
                .value_parser(clap::value_parser!(u64)),
        )
}

/// Why `shoal switch` will not start with this command line.
#[derive(Debug)]
pub enum ArgsError {
    /// clap's verdict: an unknown flag, a missing or bad value (it names the
    /// flag), or a request for the help.
    Cli(clap::Error),
    /// The switch secret could not be loaded (the loader's reason).
    Secret(SecretUnavailable),
    /// `--memory` cannot hold one job per data-plane thread.
    Memory {
        memory: usize,
        least: usize,
        payload: usize,
        threads: usize,
    },
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgsError::Cli(e) => write!(f, "{}", e.render()),
            ArgsError::Secret(why) => write!(f, "switch secret: {why}"),
            ArgsError::Memory {
                memory,
                least,
                payload,
                threads,
            } => write!(
                f,
                "--memory: {memory} bytes cannot hold one job per thread (at least {least} bytes \
                 with --payload {payload} and --threads {threads})"
            ),
        }
    }
}

impl std::error::Error for ArgsError {}

/// Parses `shoal switch` flags into a config; the secret comes from
/// `--secret-file` or, without it, from `load_secret`'s defaults.
pub fn parse_args(
    argv: &[String],
    load_secret: SecretLoader<'_>,
) -> Result<SwitchConfig, ArgsError> {
    let m = command()
        .try_get_matches_from(
            std::iter::once("shoal switch").chain(argv.iter().map(String::as_str)),
        )
        .map_err(ArgsError::Cli)?;
    let secret_file = m.get_one::<PathBuf>("secret-file");
    let secret = load_secret(secret_file.map(PathBuf::as_path)).map_err(ArgsError::Secret)?;
    let mut cfg = SwitchConfig::new(secret);
    apply(&mut cfg, &m);
    check_memory(&cfg)?;
    Ok(cfg)
}

/// The parsed (and already checked) values, into the config.
fn apply(cfg: &mut SwitchConfig, m: &ArgMatches) {
    let get = |name: &str| *m.get_one::<usize>(name).expect("has a default");
    cfg.listen = *m.get_one::<SocketAddr>("listen").expect("has a default");
    cfg.control = cfg.listen;
    cfg.memory = get("memory");
    cfg.metrics = m.get_one::<SocketAddr>("metrics").copied();
    cfg.parent = m.get_one::<SocketAddr>("parent").copied();
    if let Some(&threads) = m.get_one::<usize>("threads") {
        cfg.threads = threads;
    }
    cfg.payload_budget = get("payload");
    cfg.max_jobs = get("max-jobs");
    cfg.max_slots = get("max-slots") as u16;
    cfg.limits.max_per_client = get("max-conns-per-client");
    cfg.limits.idle_timeout = *m
        .get_one::<Duration>("idle-timeout")
        .expect("has a default");
    cfg.ecn_threshold = *m.get_one::<f64>("ecn-threshold").expect("has a default");
    cfg.int_only = m.get_flag("int-only");
    cfg.drop_rate = *m.get_one::<f64>("drop-rate").expect("has a default");
    cfg.seed = *m.get_one::<u64>("seed").expect("has a default");
}

/// Every thread's part of the memory must hold one job's minimum window
/// (two slots, each with its shadow copy) at the configured payload size.
fn check_memory(cfg: &SwitchConfig) -> Result<(), ArgsError> {
    let least = 2 * MIN_SHARE_SLOTS * slot_copy_bytes(cfg.payload_budget) * cfg.threads.max(1);
    if cfg.memory < least {
        return Err(ArgsError::Memory {
            memory: cfg.memory,
            least,
            payload: cfg.payload_budget,
            threads: cfg.threads,
        });
    }
    Ok(())
}

/// Why a flag's value is refused (clap names the flag and the value).
#[derive(Debug)]
pub enum BadValue {
    WholeNumber {
        lo: usize,
        hi: usize,
    },
    Size,
    Number,
    Seconds,
    Fraction(Open),
    /// A drop rate of 1 drops everything.
    DropsEverything,
    /// The address does not resolve (`None`: to nothing).
    Address(Option<std::io::Error>),
}

/// Which end of a fraction's range is open.
#[derive(Clone, Copy, Debug)]
pub enum Open {
    /// In (0, 1].
    Above0,
    /// In [0, 1), the drop rate.
    Below1,
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::WholeNumber { lo, hi } => write!(f, "expected a whole number in {lo}..={hi}"),
            BadValue::Size => write!(f, "expected a size such as 64MiB"),
            BadValue::Number => write!(f, "expected a number"),
            BadValue::Seconds => write!(f, "expected seconds in (0, {MAX_IDLE_SECS}]"),
            BadValue::Fraction(Open::Above0) => write!(f, "expected a fraction in (0, 1]"),
            BadValue::Fraction(Open::Below1) => write!(f, "expected a fraction in [0, 1]"),
            BadValue::DropsEverything => write!(f, "a drop rate of 1 drops everything"),
            BadValue::Address(Some(e)) => write!(f, "{e}"),
            BadValue::Address(None) => write!(f, "resolves to nothing"),
        }
    }
}

impl std::error::Error for BadValue {}

/// A parser of whole numbers in `lo..=hi`.
fn whole(lo: usize, hi: usize) -> impl Fn(&str) -> Result<usize, BadValue> + Clone {
    move |v: &str| {
        v.parse::<usize>()
            .ok()
            .filter(|n| (lo..=hi).contains(n))
            .ok_or(BadValue::WholeNumber { lo, hi })
    }
}

fn size(v: &str) -> Result<usize, BadValue> {
    parse_size(v).ok_or(BadValue::Size)
}

fn idle_seconds(v: &str) -> Result<Duration, BadValue> {
    let s: f64 = v.parse().map_err(|_| BadValue::Seconds)?;
    if !(s > 0.0 && s <= MAX_IDLE_SECS) {
        return Err(BadValue::Seconds);
    }
    Ok(Duration::from_secs_f64(s))
}

fn fraction(v: &str, open: Open) -> Result<f64, BadValue> {
    let r: f64 = v.parse().map_err(|_| BadValue::Number)?;
    let in_range = match open {
        Open::Above0 => r > 0.0 && r <= 1.0,
        Open::Below1 => (0.0..=1.0).contains(&r),
    };
    if !in_range {
        return Err(BadValue::Fraction(open));
    }
    if matches!(open, Open::Below1) && r == 1.0 {
        return Err(BadValue::DropsEverything);
    }
    Ok(r)
}

/// `:9801` means all interfaces; host names are resolved.
fn addr(v: &str) -> Result<SocketAddr, BadValue> {
    let full = if v.starts_with(':') {
        format!("0.0.0.0{v}")
    } else {
        v.to_string()
    };
    full.to_socket_addrs()
        .map_err(|e| BadValue::Address(Some(e)))?
        .next()
        .ok_or(BadValue::Address(None))
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

    fn parse(line: &str) -> Result<SwitchConfig, ArgsError> {
        let argv: Vec<String> = line.split_whitespace().map(String::from).collect();
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
    fn defaults_are_the_documented_ones() {
        let c = parse("").unwrap();
        let d = SwitchConfig::new(Key::from_material(b"default"));
        assert_eq!(c.listen, "0.0.0.0:9800".parse().unwrap());
        assert_eq!(c.control, c.listen);
        assert_eq!(
            (
                c.memory,
                c.threads,
                c.payload_budget,
                c.max_jobs,
                c.max_slots
            ),
            (
                d.memory,
                d.threads,
                d.payload_budget,
                d.max_jobs,
                d.max_slots
            )
        );
        assert_eq!(c.limits.max_per_client, d.limits.max_per_client);
        assert_eq!(c.limits.idle_timeout, d.limits.idle_timeout);
        assert_eq!(
            (c.ecn_threshold, c.drop_rate, c.seed),
            (d.ecn_threshold, d.drop_rate, d.seed)
        );
        assert!(!c.int_only && c.metrics.is_none() && c.parent.is_none());
        assert!(parse("--int-only --seed 9").is_ok_and(|c| c.int_only && c.seed == 9));
        assert!(matches!(
            parse("--memory 1KiB"),
            Err(ArgsError::Memory { .. })
        ));
        let help = parse("--help").unwrap_err();
        let ArgsError::Cli(e) = help else {
            panic!("{help}")
        };
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        for flag in [
            "--listen",
            "--max-conns-per-client",
            "--drop-rate",
            "--int-only",
        ] {
            assert!(e.to_string().contains(flag), "{flag}");
        }
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
            let err = parse(line).unwrap_err().to_string();
            let flag = line.split(' ').next().unwrap();
            assert!(err.contains(flag), "{line}: {err}");
        }
    }

    #[test]
    fn a_secret_that_cannot_be_loaded_is_an_error() {
        let err = parse_args(&[], &|_: Option<&Path>| Err("no such file".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("switch secret") && err.contains("no such file"),
            "{err}"
        );
    }
}
