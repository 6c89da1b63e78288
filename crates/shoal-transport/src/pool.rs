//! Receive buffers kept for reuse.
//!
//! A payload that cannot land straight in its destination (it arrived before
//! its receive was posted, or goes to a sink) lands in a heap buffer first.
//! A fresh large buffer is mapped anew by the allocator, and the first write
//! into it page-faults every 4 KiB: when that write is the kernel's
//! cross-process copy (CMA, UCX over shared memory), the faults took half the
//! time of a 16 MiB allreduce. Handing buffers back here once their bytes
//! were consumed keeps their pages mapped for the next payload.

/// What a transport that asks for no pool keeps: [`BufferPool::take`]
/// then allocates and [`BufferPool::give`] frees, as without a pool.
pub(crate) const KEEP_NONE: usize = 0;

/// Smaller buffers are neither kept nor served: the allocator hands them
/// out of memory it keeps anyway.
pub(crate) const MIN_KEPT: usize = 64 << 10;

/// Idle buffers of at most `max_bytes` together (their capacities).
pub(crate) struct BufferPool {
    kept: Vec<Vec<u8>>,
    max_bytes: usize,
}

impl BufferPool {
    pub fn new(max_bytes: usize) -> BufferPool {
        BufferPool {
            kept: Vec::new(),
            max_bytes,
        }
    }

    /// A buffer of exactly `len` bytes: the smallest kept one that can hold
    /// them (its contents are stale, not zeroed), else a new one.
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        if len < MIN_KEPT {
            return vec![0; len];
        }
        let fit = (0..self.kept.len())
            .filter(|&i| self.kept[i].capacity() >= len)
            .min_by_key(|&i| self.kept[i].capacity());
        match fit {
            Some(i) => {
                let mut b = self.kept.swap_remove(i);
                // Within the capacity: no allocation, and only bytes past
                // the buffer's last length are written.
                b.resize(len, 0);
                b
            }
            None => vec![0; len],
        }
    }

    /// Takes back a buffer whose bytes were consumed; the smallest buffers
    /// are dropped when more than `max_bytes` would be kept.
    pub fn give(&mut self, buf: Vec<u8>) {
        if buf.capacity() < MIN_KEPT || buf.capacity() > self.max_bytes {
            return;
        }
        self.kept.push(buf);
        while self.kept_bytes() > self.max_bytes {
            let smallest = (0..self.kept.len())
                .min_by_key(|&i| self.kept[i].capacity())
                .unwrap();
            self.kept.swap_remove(smallest);
        }
    }

    /// The most bytes of idle buffers kept.
    #[cfg(test)]
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    fn kept_bytes(&self) -> usize {
        self.kept.iter().map(Vec::capacity).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_given_buffer_is_taken_again_at_any_length_it_holds() {
        let mut pool = BufferPool::new(2 * MIB);
        let buf = pool.take(MIB);
        let at = buf.as_ptr();
        pool.give(buf);
        let again = pool.take(MIN_KEPT);
        assert_eq!((again.as_ptr(), again.len()), (at, MIN_KEPT));
        pool.give(again);
        let full = pool.take(MIB);
        assert_eq!((full.as_ptr(), full.len()), (at, MIB));
    }

    #[test]
    fn the_smallest_fitting_buffer_is_taken() {
        let mut pool = BufferPool::new(4 * MIB);
        let (big, small) = (pool.take(2 * MIB), pool.take(MIB));
        let (big_at, small_at) = (big.as_ptr(), small.as_ptr());
        pool.give(big);
        pool.give(small);
        let (first, second) = (pool.take(MIN_KEPT), pool.take(MIN_KEPT));
        assert_eq!((first.as_ptr(), second.as_ptr()), (small_at, big_at));
    }

    #[test]
    fn a_full_pool_drops_its_smallest_buffers() {
        let mut pool = BufferPool::new(6 * MIB);
        let bufs: Vec<Vec<u8>> = [MIB, 4 * MIB, 2 * MIB].map(|n| pool.take(n)).into();
        let mut want: Vec<*const u8> = bufs[1..].iter().map(|b| b.as_ptr()).collect();
        for b in bufs {
            pool.give(b);
        }
        let mut left: Vec<*const u8> = pool.kept.iter().map(|b| b.as_ptr()).collect();
        left.sort();
        want.sort();
        assert_eq!(left, want);
        pool.give(Vec::with_capacity(6 * MIB + 1));
        assert_eq!(pool.kept_bytes(), 6 * MIB);
    }

    #[test]
    fn small_buffers_are_not_kept() {
        let mut pool = BufferPool::new(MIB);
        pool.give(vec![0; MIN_KEPT - 1]);
        assert!(pool.kept.is_empty());
        pool.give(vec![0; MIB]);
        assert_eq!(pool.take(MIN_KEPT - 1).capacity(), MIN_KEPT - 1);
        assert_eq!(pool.kept.len(), 1);
    }

    #[test]
    fn a_pool_keeping_none_allocates_afresh() {
        let mut pool = BufferPool::new(KEEP_NONE);
        pool.give(vec![0; MIB]);
        assert!(pool.kept.is_empty());
        assert_eq!(pool.take(MIB).len(), MIB);
    }
}
