//! Command-line flags of `shoal switch`.

use std::net::{SocketAddr, ToSocketAddrs};

use super::SwitchConfig;

pub const USAGE: &str = "usage: shoal switch [options]

  --listen ADDR         UDP data plane and TCP control address (default 0.0.0.0:9800)
  --memory SIZE         aggregation memory shared by jobs, e.g. 64MiB (default 64MiB)
  --metrics ADDR        serve Prometheus metrics over HTTP, e.g. :9801
  --parent HOST:PORT    UDP address of the parent switch (this one becomes a leaf)
  --payload BYTES       largest UDP payload (default 1472, a 1500-byte MTU)
  --max-jobs N          concurrent jobs (default 64)
  --max-slots N         largest slot pool / window per job (default 512)
  --ecn-threshold F     memory fraction in use past which results carry ECN (default 0.8)
  --int-only            refuse float element types (emulates a switch ASIC)
  --drop-rate F         test knob: drop this fraction of received packets
  --seed N              seed of the drop knob (default 1)";

/// Parses `shoal switch` flags into a config.
pub fn parse_args(argv: &[String]) -> Result<SwitchConfig, String> {
    let mut cfg = SwitchConfig::default();
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        if flag == "--int-only" {
            cfg.int_only = true;
            continue;
        }
        let (flag, value) = match flag.split_once('=') {
            Some((f, v)) => (f.to_string(), v.to_string()),
            None => {
                let v = it.next().ok_or(format!("{flag} needs a value"))?;
                (flag.clone(), v.clone())
            }
        };
        apply(&mut cfg, &flag, &value)?;
    }
    Ok(cfg)
}

fn apply(cfg: &mut SwitchConfig, flag: &str, v: &str) -> Result<(), String> {
    let bad = |what: &str| format!("{flag}: {what} {v:?}");
    match flag {
        "--listen" => {
            cfg.listen = addr(v)?;
            cfg.control = cfg.listen;
        }
        "--memory" => cfg.memory = parse_size(v).ok_or_else(|| bad("bad size"))?,
        "--metrics" => cfg.metrics = Some(addr(v)?),
        "--parent" => cfg.parent = Some(addr(v)?),
        "--payload" => {
            let p: usize = v.parse().map_err(|_| bad("bad number"))?;
            if !(64..=65507).contains(&p) {
                return Err(bad("payload out of 64..=65507"));
            }
            cfg.payload_budget = p;
        }
        "--max-jobs" => cfg.max_jobs = v.parse().map_err(|_| bad("bad number"))?,
        "--max-slots" => cfg.max_slots = v.parse().map_err(|_| bad("bad number"))?,
        "--ecn-threshold" => cfg.ecn_threshold = v.parse().map_err(|_| bad("bad number"))?,
        "--drop-rate" => {
            let r: f64 = v.parse().map_err(|_| bad("bad number"))?;
            if !(0.0..1.0).contains(&r) {
                return Err(bad("rate out of [0, 1)"));
            }
            cfg.drop_rate = r;
        }
        "--seed" => cfg.seed = v.parse().map_err(|_| bad("bad number"))?,
        _ => return Err(format!("unknown option {flag}")),
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

    #[test]
    fn flags() {
        let argv: Vec<String> =
            "--listen 127.0.0.1:9800 --memory 64MiB --metrics :9801 --drop-rate=0.01"
                .split(' ')
                .map(String::from)
                .collect();
        let c = parse_args(&argv).unwrap();
        assert_eq!(c.memory, 64 << 20);
        assert_eq!(c.metrics.unwrap().port(), 9801);
        assert_eq!(c.control, c.listen);
        assert!((c.drop_rate - 0.01).abs() < 1e-12);
        assert!(parse_args(&["--bogus".into(), "1".into()]).is_err());
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("12x"), None);
    }
}
