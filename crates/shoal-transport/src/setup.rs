//! The agreement every rank checks before it builds a transport: the ranks
//! it will connect to must have joined the setup and agree with it on the
//! world size and, on one host, on the transport (`SHOAL_TRANSPORT`).
//!
//! Without it a disagreement shows only as a timeout (one rank waiting for
//! a shared-memory segment that its peer, set to TCP, never creates) with
//! segments left behind. With it the cause is named at once, before
//! anything is created; a rank that never comes is named after the store's
//! timeout.

use std::io::ErrorKind;
use std::time::Instant;

use crate::{KvStore, Result, TransportError};

/// What a rank tells its peers before building its transports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SetupRecord {
    pub world: usize,
    /// Whether this rank reaches the ranks of its host over shared memory.
    pub shm: bool,
    /// Whether the ranks it does not reach over shared memory go over UCX
    /// (else TCP); every rank of a job must agree.
    pub ucx: bool,
}

impl SetupRecord {
    /// What carries the ranks not reached over shared memory.
    fn net(&self) -> &'static str {
        if self.ucx {
            "ucx"
        } else {
            "tcp"
        }
    }

    fn transport(&self) -> &'static str {
        if self.shm {
            "shm"
        } else {
            self.net()
        }
    }

    fn encode(&self) -> String {
        format!(
            "world={} transport={} net={}",
            self.world,
            self.transport(),
            self.net()
        )
    }

    fn decode(text: &str) -> Option<SetupRecord> {
        let (world, rest) = text.strip_prefix("world=")?.split_once(" transport=")?;
        // (a record without `net` is from a build before UCX: tcp)
        let (transport, net) = rest.split_once(" net=").unwrap_or((rest, "tcp"));
        let ucx = match net {
            "ucx" => true,
            "tcp" => false,
            _ => return None,
        };
        let shm = match transport {
            "shm" => true,
            "tcp" | "ucx" if transport == net => false,
            _ => return None,
        };
        Some(SetupRecord {
            world: world.parse().ok()?,
            shm,
            ucx,
        })
    }
}

/// Checks this rank's record against the record of each of `peers`, and
/// publishes it; the transport must agree only with `local` peers (ranks
/// of other hosts talk TCP whatever they chose).
///
/// The records of lower ranks are read before this rank publishes its own:
/// a lower rank then cannot fail on this rank's record and leave (rank 0,
/// which serves the store, taking the store along) before this rank has
/// seen the disagreement too. A rank that finds one still publishes its
/// record, so the ranks after it see it as well.
pub(crate) fn agree(
    store: &dyn KvStore,
    job: &str,
    rank: usize,
    mine: SetupRecord,
    peers: &[usize],
    local: &[usize],
) -> Result<()> {
    let key = |r: usize| format!("{job}/setup/{r}");
    let publish = || {
        store
            .set(&key(rank), mine.encode().as_bytes())
            .map_err(|e| setup_error(format!("publishing this rank's setup: store: {e}")))
    };
    let check = |peer: usize| {
        let bytes = wait_for_rank(store, &key(peer), peer)?;
        let text = String::from_utf8_lossy(&bytes);
        let theirs = SetupRecord::decode(&text).ok_or_else(|| {
            setup_error(format!(
                "rank {peer} published a malformed setup record {text:?}"
            ))
        })?;
        compare(rank, mine, peer, theirs, local.contains(&peer))
    };
    for &peer in peers.iter().filter(|&&p| p < rank) {
        if let Err(e) = check(peer) {
            let _ = publish();
            return Err(e);
        }
    }
    publish()?;
    peers
        .iter()
        .filter(|&&p| p > rank)
        .try_for_each(|&p| check(p))
}

/// Whether two ranks' records agree; both ranks of a pair word the error
/// alike, lower rank first.
fn compare(
    rank: usize,
    mine: SetupRecord,
    peer: usize,
    theirs: SetupRecord,
    same_host: bool,
) -> Result<()> {
    let ((lo, lo_says), (hi, hi_says)) = if peer < rank {
        ((peer, theirs), (rank, mine))
    } else {
        ((rank, mine), (peer, theirs))
    };
    if theirs.world != mine.world {
        return Err(setup_error(format!(
            "ranks disagree on the world size: rank {lo} has {}, rank {hi} has {}",
            lo_says.world, hi_says.world
        )));
    }
    if theirs.ucx != mine.ucx {
        return Err(setup_error(format!(
            "ranks disagree on the transport between hosts: rank {hi} uses {} but rank {lo} \
             uses {} (SHOAL_TRANSPORT and SHOAL_REMOTE_TRANSPORT must be alike on every rank)",
            hi_says.net(),
            lo_says.net()
        )));
    }
    if theirs.shm != mine.shm && same_host {
        return Err(setup_error(format!(
            "ranks of one host disagree on the transport: rank {hi} uses {} but rank {lo} \
             uses {} (SHOAL_TRANSPORT must be alike on every rank)",
            hi_says.transport(),
            lo_says.transport()
        )));
    }
    Ok(())
}

/// Reads `key`, which `rank` publishes during setup; the store's timeout
/// becomes an error naming the rank that never came (with the store's own
/// words, which tell when the store gave up early, e.g. because its host
/// exited).
pub(crate) fn wait_for_rank(store: &dyn KvStore, key: &str, rank: usize) -> Result<Vec<u8>> {
    let started = Instant::now();
    store.get(key).map_err(|e| {
        if e.kind() == ErrorKind::TimedOut {
            setup_error(format!(
                "rank {rank} never joined the transport setup (waited {:.1} s: {e})",
                started.elapsed().as_secs_f64()
            ))
        } else {
            setup_error(format!("waiting for rank {rank}: store: {e}"))
        }
    })
}

fn setup_error(msg: String) -> TransportError {
    TransportError::Io(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_garbage() {
        for r in [
            SetupRecord {
                world: 3,
                shm: true,
                ucx: false,
            },
            SetupRecord {
                world: 1,
                shm: false,
                ucx: false,
            },
            SetupRecord {
                world: 2,
                shm: true,
                ucx: true,
            },
            SetupRecord {
                world: 2,
                shm: false,
                ucx: true,
            },
        ] {
            assert_eq!(SetupRecord::decode(&r.encode()), Some(r));
        }
        assert_eq!(
            SetupRecord::decode("world=2 transport=shm"),
            Some(SetupRecord {
                world: 2,
                shm: true,
                ucx: false
            })
        );
        for bad in [
            "",
            "world=x transport=shm",
            "world=2 transport=udp net=tcp",
            "world=2 transport=tcp net=ucx",
            "world=2",
        ] {
            assert_eq!(SetupRecord::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn ranks_disagreeing_on_the_network_transport_are_named_on_any_host() {
        let rec = |ucx| SetupRecord {
            world: 4,
            shm: true,
            ucx,
        };
        let e = compare(2, rec(true), 0, rec(false), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 2 uses ucx but rank 0 uses tcp"), "{e}");
        assert!(e.contains("SHOAL_REMOTE_TRANSPORT"), "{e}");
        assert!(compare(2, rec(true), 0, rec(true), false).is_ok());
    }
}
