//! One direction of one pair of local ranks: a single-producer,
//! single-consumer byte ring in the receiver's segment. Positions grow
//! without bound; the producer publishes `tail`, the consumer `head`, each
//! on its own cache line.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::segment::Mapping;

/// Ring positions, each on its own cache line (producer and consumer write one each).
#[repr(C, align(64))]
pub(super) struct Pos(pub(super) AtomicU64);

#[repr(C)]
pub(super) struct RingHdr {
    pub(super) tail: Pos,
    pub(super) head: Pos,
}

/// One direction of one pair: a byte ring with monotonically growing positions.
pub(super) struct Ring {
    pub(super) hdr: *const RingHdr,
    pub(super) data: *mut u8,
    pub(super) size: usize,
    pub(super) _map: Arc<Mapping>,
}

impl Ring {
    pub(super) fn hdr(&self) -> &RingHdr {
        // SAFETY: points into the live mapping.
        unsafe { &*self.hdr }
    }

    /// Copies `src` into the ring at position `pos` (wrapping).
    pub(super) fn write(&self, pos: u64, src: &[u8]) {
        let at = (pos % self.size as u64) as usize;
        let first = src.len().min(self.size - at);
        // SAFETY: both ranges are inside the ring; the producer owns [tail, head+size).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.data.add(at), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data, src.len() - first);
        }
    }

    /// The contiguous readable bytes at `pos`, at most `max`.
    pub(super) fn read(&self, pos: u64, max: usize) -> &[u8] {
        let at = (pos % self.size as u64) as usize;
        // SAFETY: the consumer owns [head, tail) and `max` stays below it.
        unsafe { std::slice::from_raw_parts(self.data.add(at), max.min(self.size - at)) }
    }
}

pub(super) fn pad64(n: usize) -> usize {
    n.div_ceil(64) * 64
}
