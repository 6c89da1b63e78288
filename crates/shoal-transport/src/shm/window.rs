//! Shared memory as memory, for the plan steps `Expose`, `PeerRead`,
//! `PeerReadReduce` and `Release`: each rank publishes the address and
//! length of an exposed region in its control block ([`ExposedFlag`],
//! stamped with the call), peers read it straight from its memory with
//! `process_vm_readv` and count their finished reads there, and the owner
//! waits for that count before it writes the region again.
//!
//! Small regions go through slots instead (`expose_slot`): the owner copies
//! them into one of its slot buffers at the end of its segment, which every
//! local peer has mapped, and peers read them with plain loads. The owner
//! does not wait for those reads: it fills the first buffer whose reads, as
//! its plan declared them (`slot_release`), are all counted. Calls whose
//! readers keep up so reuse one or two buffers, which stay in both ranks'
//! caches (taking the eight in turn, 8 KiB broadcasts took 1.5 times as
//! long on the 2-vCPU dev VM: docs/benchmarks.md); a rank whose readers
//! lag, as a broadcast's root, runs ahead on the others.
//!
//! Waits spin (yielding), then sleep on this rank's doorbell, which exposing
//! and reading peers ring; each round polls the transport, so a peer that
//! died or aborted fails the wait within its liveness period.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::segment::{Mapping, SlotHdr, EXPOSED_FLAGS};
use super::{io, io_err, ShmTransport};
use crate::doorbell::{wait_on_spinning, Doorbell};
use crate::{cma, CallSig, Exposed, Result, SharedWindow, SlotExpose, TransportError};

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
        self.reads_all
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

    fn expose_slot(&self, flag: u32, stamp: u64, sig: &CallSig, src: &[u8]) -> Result<SlotExpose> {
        flag_index(flag)?;
        if src.len() > self.slot_size {
            return Ok(SlotExpose::TooBig);
        }
        let Some(index) = self.free_slot() else {
            return Ok(SlotExpose::Busy);
        };
        let h = &self.own.control().slots[index];
        // SAFETY: the buffer is this rank's and no peer reads it (every read
        // of its last content is counted); src fits (checked above).
        unsafe {
            let data = self.own.slot_data(index, self.slot_size);
            std::ptr::copy_nonoverlapping(src.as_ptr(), data, src.len());
        }
        h.reads.store(0, Ordering::Relaxed);
        h.expected.store(u32::MAX, Ordering::Relaxed);
        h.flag.store(flag, Ordering::Relaxed);
        h.len.store(src.len() as u64, Ordering::Relaxed);
        for (word, value) in h.sig.iter().zip(pack(sig)) {
            word.store(value, Ordering::Relaxed);
        }
        h.stamp.store(stamp, Ordering::Release);
        for p in self.window.iter().flatten() {
            p.bell.ring();
        }
        Ok(SlotExpose::Placed(index))
    }

    fn slot_busy(&self) -> bool {
        self.free_slot().is_none()
    }

    fn slot_release(&self, index: usize, reads: u32) -> Result<()> {
        let h = self.own.control().slots.get(index);
        let h = h.ok_or_else(|| io_err(&format!("no slot buffer {index}")))?;
        h.expected.store(reads, Ordering::Release);
        Ok(())
    }

    fn exposed(
        &self,
        peer: usize,
        flag: u32,
        stamp: u64,
        sig: &CallSig,
    ) -> Result<Option<Exposed>> {
        let p = self.window_peer(peer)?;
        let ctl = p.map.control();
        let e = &ctl.exposed[flag_index(flag)?];
        if e.stamp.load(Ordering::Acquire) == stamp {
            self.same_call(peer, stamp, sig, &e.sig)?;
            let addr = e.addr.load(Ordering::Relaxed);
            let len = e.len.load(Ordering::Relaxed) as usize;
            return Ok(Some(Exposed::Memory { addr, len }));
        }
        for (index, h) in ctl.slots.iter().enumerate() {
            if h.stamp.load(Ordering::Acquire) == stamp && h.flag.load(Ordering::Relaxed) == flag {
                self.same_call(peer, stamp, sig, &h.sig)?;
                let len = h.len.load(Ordering::Relaxed) as usize;
                let data = p.map.slot_data(index, self.slot_size);
                return Ok(Some(Exposed::Slot { data, len, index }));
            }
        }
        Ok(None)
    }

    fn read(&self, peer: usize, addr: u64, dst: &mut [u8]) -> Result<()> {
        let p = self.window_peer(peer)?;
        cma::read_exact(p.pid, addr, dst).map_err(io)
    }

    fn read_done(&self, peer: usize, flag: u32, slot: Option<usize>) -> Result<()> {
        let p = self.window_peer(peer)?;
        let ctl = p.map.control();
        let reads = match slot {
            Some(index) => &slot_hdr(ctl.slots.get(index), index)?.reads,
            None => &ctl.exposed[flag_index(flag)?].reads,
        };
        reads.fetch_add(1, Ordering::AcqRel);
        p.bell.ring();
        Ok(())
    }

    fn reads_done(&self, flag: u32) -> Result<u32> {
        let e = &self.own.control().exposed[flag_index(flag)?];
        Ok(e.reads.load(Ordering::Acquire))
    }

    fn wait_until(&self, timeout: Duration, ready: &mut dyn FnMut() -> bool) -> Result<()> {
        wait_on_spinning(
            &self.bell,
            timeout,
            self.spin,
            || Ok(self.poll()? | ready()),
        )
    }
}

impl ShmTransport {
    /// The first slot buffer whose reads are all counted.
    fn free_slot(&self) -> Option<usize> {
        self.own
            .control()
            .slots
            .iter()
            .position(|h| h.reads.load(Ordering::Acquire) >= h.expected.load(Ordering::Acquire))
    }

    /// Errors unless the peer's exposure (signature words `words`) belongs
    /// to a call with our signature.
    fn same_call(
        &self,
        peer: usize,
        stamp: u64,
        sig: &CallSig,
        words: &[AtomicU64; 3],
    ) -> Result<()> {
        let theirs = unpack([0, 1, 2].map(|i| words[i].load(Ordering::Relaxed)));
        if theirs == *sig {
            return Ok(());
        }
        Err(TransportError::Mismatch {
            rank: self.rank,
            peer,
            seq: stamp as u32,
            ours: Some(*sig),
            theirs,
        })
    }
}

fn slot_hdr(h: Option<&SlotHdr>, index: usize) -> Result<&SlotHdr> {
    h.ok_or_else(|| io_err(&format!("no slot buffer {index}")))
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
