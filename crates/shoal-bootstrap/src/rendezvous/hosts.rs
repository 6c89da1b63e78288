//! Which ranks share a host: this process's host id, and the map built
//! from every rank's.

use super::{nonempty, Env};
use crate::{Error, Result};

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
pub(super) fn host_map(rank: usize, world: usize, joined: &[u8]) -> Result<HostMap> {
    let ids: Vec<String> = String::from_utf8_lossy(joined)
        .split('\n')
        .map(str::to_string)
        .collect();
    if ids.len() != world {
        return Err(Error::HostList {
            rank,
            listed: ids.len(),
            world,
        });
    }
    Ok(HostMap::from_ids(rank, &ids))
}

pub(super) fn check_host_id(host_id: &str) -> Result<()> {
    if host_id.is_empty() || host_id.contains('\n') {
        return Err(Error::BadHostId(host_id.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous::tests::env_of;

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
}
