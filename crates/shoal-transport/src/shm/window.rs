//! Shared memory as memory, for the plan steps `Expose`, `PeerRead`,
//! `PeerReadReduce` and `Release`: each rank publishes the address and
//! length of an exposed region in its control block ([`ExposedFlag`],
//! stamped with the call), peers read it straight from its memory with
//! `process_vm_readv` and count their finished reads there, and the owner
//! waits for that count before it writes the region again.
//!
//! Waits spin (yielding), then sleep on this rank's doorbell, which exposing
//! and reading peers ring; each round polls the transport, so a peer that
//! died or aborted fails the wait within its liveness period.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::segment::{Mapping, EXPOSED_FLAGS};
use super::{io, io_err, ShmTransport};
use crate::doorbell::{wait_on, Doorbell};
use crate::{cma, CallSig, Result, SharedWindow, TransportError};

/// A local peer as the window sees it.
pub(super) struct WindowPeer {
    pub(super) map: Arc<Mapping>,
    pub(super) pid: i32,
    /// Whether the kernel lets this process read the peer's memory.
    pub(super) readable: bool,
    pub(super) bell: Doorbell,
}

impl ShmTransport {
    fn window_peer(&self, peer: usize) -> Result<&WindowPeer> {
        self.window
            .get(peer)
            .and_then(|p| p.as_ref())
            .ok_or_else(|| io_err(&format!("rank {peer} is not on this host")))
    }
}

fn flag_index(flag: u32) -> Result<usize> {
    let i = flag as usize;
    if i >= EXPOSED_FLAGS {
        return Err(io_err(&format!(
            "exposed flag {flag} is beyond the {EXPOSED_FLAGS} a rank can expose at once"
        )));
    }
    Ok(i)
}

impl SharedWindow for ShmTransport {
    fn can_read_all(&self) -> bool {
        self.window
            .iter()
            .enumerate()
            .all(|(r, p)| r == self.rank || p.as_ref().is_some_and(|p| p.readable))
    }

    fn expose(&self, flag: u32, stamp: u64, sig: &CallSig, addr: u64, len: usize) -> Result<()> {
        let e = &self.own.control().exposed[flag_index(flag)?];
        e.reads.store(0, Ordering::Relaxed);
        for (word, value) in e.sig.iter().zip(pack(sig)) {
            word.store(value, Ordering::Relaxed);
        }
        e.addr.store(addr, Ordering::Relaxed);
        e.len.store(len as u64, Ordering::Relaxed);
        e.stamp.store(stamp, Ordering::Release);
        for p in self.window.iter().flatten() {
            p.bell.ring();
        }
        Ok(())
    }

    fn exposed(
        &self,
        peer: usize,
        flag: u32,
        stamp: u64,
        sig: &CallSig,
    ) -> Result<Option<(u64, usize)>> {
        let p = self.window_peer(peer)?;
        let e = &p.map.control().exposed[flag_index(flag)?];
        if e.stamp.load(Ordering::Acquire) != stamp {
            return Ok(None);
        }
        let theirs = unpack([0, 1, 2].map(|i| e.sig[i].load(Ordering::Relaxed)));
        if theirs != *sig {
            return Err(TransportError::Mismatch {
                rank: self.rank,
                peer,
                seq: stamp as u32,
                ours: Some(*sig),
                theirs,
            });
        }
        let addr = e.addr.load(Ordering::Relaxed);
        Ok(Some((addr, e.len.load(Ordering::Relaxed) as usize)))
    }

    fn read(&self, peer: usize, addr: u64, dst: &mut [u8]) -> Result<()> {
        let p = self.window_peer(peer)?;
        cma::read_exact(p.pid, addr, dst).map_err(io)
    }

    fn read_done(&self, peer: usize, flag: u32) -> Result<()> {
        let p = self.window_peer(peer)?;
        let e = &p.map.control().exposed[flag_index(flag)?];
        e.reads.fetch_add(1, Ordering::AcqRel);
        p.bell.ring();
        Ok(())
    }

    fn reads_done(&self, flag: u32) -> Result<u32> {
        let e = &self.own.control().exposed[flag_index(flag)?];
        Ok(e.reads.load(Ordering::Acquire))
    }

    fn wait_until(&self, timeout: Duration, ready: &mut dyn FnMut() -> bool) -> Result<()> {
        wait_on(&self.bell, timeout, || Ok(self.poll()? | ready()))
    }
}

/// A signature as three words of an [`super::segment::ExposedFlag`].
fn pack(s: &CallSig) -> [u64; 3] {
    let head = u64::from(s.kind) | u64::from(s.dtype) << 8 | u64::from(s.op) << 16;
    [
        head | u64::from(s.algo) << 32,
        u64::from(s.root) | u64::from(s.history) << 32,
        s.count,
    ]
}

fn unpack(w: [u64; 3]) -> CallSig {
    CallSig {
        kind: w[0] as u8,
        dtype: (w[0] >> 8) as u8,
        op: (w[0] >> 16) as u8,
        algo: (w[0] >> 32) as u32,
        root: w[1] as u32,
        history: (w[1] >> 32) as u32,
        count: w[2],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_survive_packing() {
        let s = CallSig {
            kind: 3,
            dtype: 250,
            op: 7,
            algo: 0xdead_beef,
            root: 0xffff_fffe,
            count: u64::MAX - 5,
            history: 0x1234_5678,
        };
        assert_eq!(unpack(pack(&s)), s);
    }
}
