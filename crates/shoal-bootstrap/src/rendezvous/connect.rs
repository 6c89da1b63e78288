//! Opening the store a rank meets the others at: an external one, or the
//! server rank 0 starts at the master address, and what it allows.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::launcher::ProcessInfo;
use super::{nonempty, Env};
use crate::secret::JobSecret;
use crate::store::{FileStore, Store, StoreLimits, TcpStore, TcpStoreServer, DEFAULT_MAX_VALUE};
use crate::{Error, Result};

/// Rank 0's store accepts one connection per rank and this many more (a
/// rank reconnecting after an error before the server has noticed the old
/// connection close).
const CONNECTION_MARGIN: usize = 64;

/// What the store allows its clients: `SHOAL_STORE_MAX_VALUE` (default
/// [`DEFAULT_MAX_VALUE`]) and 64 connections beyond one per rank.
pub fn store_limits(env: Env, world: usize) -> Result<StoreLimits> {
    let var = "SHOAL_STORE_MAX_VALUE";
    let max_value = match nonempty(env, var) {
        None => DEFAULT_MAX_VALUE,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => return Err(Error::bad(var, v, "is not a positive number of bytes")),
        },
    };
    Ok(StoreLimits {
        max_value,
        max_connections: world.saturating_add(CONNECTION_MARGIN),
    })
}

/// The job secret ([`JobSecret::load`]); a process that is the whole job
/// and meets no external store draws a fresh one that nothing else needs.
pub fn job_secret(info: &ProcessInfo, env: Env) -> Result<JobSecret> {
    let secret = if info.world_size == 1 && info.store_addr.is_none() {
        JobSecret::ephemeral()
    } else {
        JobSecret::load(env)
    };
    Ok(secret?)
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
) -> Result<(Store, Option<TcpStoreServer>)> {
    if let Some(dir) = &info.store_path {
        let s = FileStore::new(dir, timeout).map_err(Error::StorePath)?;
        return Ok((Store::File(s), None));
    }
    let client = |addr: &str, of: &'static str| {
        TcpStore::connect(addr, secret, limits, timeout)
            .map_err(|source| Error::StoreConnect { of, source })
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
                served.map_err(|e| Error::AtMaster {
                    host: host.clone(),
                    port,
                    source: Box::new(e),
                })
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
) -> Result<TcpStoreServer> {
    let mut last = None;
    for bind in binds {
        match TcpStoreServer::start(bind, secret, *limits) {
            Ok(server) => return Ok(server),
            Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => last = Some(e),
            Err(e) => return Err(Error::StoreServer(e)),
        }
    }
    Err(Error::StoreServer(last.unwrap_or_else(|| {
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
pub fn store_bind_addrs(host: &str, port: u16) -> Result<Vec<String>> {
    let literal = host.parse::<IpAddr>().ok();
    let resolved: Vec<IpAddr> = match literal {
        Some(ip) => vec![ip],
        None => (host, port)
            .to_socket_addrs()
            .map_err(|e| Error::bad("MASTER_ADDR", host, format!("does not resolve: {e}")))?
            .map(|a| a.ip())
            .collect(),
    };
    let first = *resolved
        .first()
        .ok_or_else(|| Error::bad("MASTER_ADDR", host, "resolves to no address"))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::launcher::{detect, Explicit};
    use crate::rendezvous::tests::{env_of, TEST_SECRET};

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
            .unwrap()
            .to_string();
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
        let e = store_bind_addrs("no-such-host.invalid", p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MASTER_ADDR=\"no-such-host.invalid\" does not resolve"),
            "{e}"
        );
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
            let e = store_limits(&env_of(&[("SHOAL_STORE_MAX_VALUE", bad)]), 1)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("SHOAL_STORE_MAX_VALUE") && e.contains(bad),
                "{e}"
            );
        }
    }
}
