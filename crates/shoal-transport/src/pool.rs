//! Receive buffers kept for reuse.
//!
//! A payload that cannot land straight in its destination (it arrived before
//! its receive was posted, or goes to a sink) lands in a heap buffer first.
//! A fresh large buffer is mapped anew by the allocator, and the first write
//! into it page-faults every 4 KiB: when that write is the kernel's
//! cross-process copy (CMA, UCX over shared memory), the faults took half the
//! time of a 16 MiB allreduce. Handing buffers back here once their bytes
//! were consumed keeps their pages mapped for the next payload.

/// Buffers kept by a transport that asks for none: [`BufferPool::take`]
/// then allocates and [`BufferPool::give`] frees, as without a pool.
pub(crate) const KEEP_NONE: usize = 0;

/// Bytes a pool keeps at most, all buffers together: the largest buffers
/// are kept first, so a job's big payloads are served and a 1 GiB one does
/// not pin 1 GiB per rank after its call.
pub(crate) const MAX_KEPT_BYTES: usize = 256 << 20;

/// At most `max_buffers` idle buffers (and [`MAX_KEPT_BYTES`] in all).
pub(crate) struct BufferPool {
    kept: Vec<Vec<u8>>,
    max_buffers: usize,
}

impl BufferPool {
    pub fn new(max_buffers: usize) -> BufferPool {
        BufferPool {
            kept: Vec::new(),
            max_buffers,
        }
    }

    /// A buffer of exactly `len` bytes: the smallest kept one that can hold
    /// them (its contents are stale, not zeroed), else a new one.
    pub fn take(&mut self, len: usize) -> Vec<u8> {
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
    /// are dropped when more than the bounds would be kept.
    pub fn give(&mut self, buf: Vec<u8>) {
        if self.max_buffers == KEEP_NONE || buf.capacity() > MAX_KEPT_BYTES {
            return;
        }
        self.kept.push(buf);
        while self.kept.len() > self.max_buffers || self.kept_bytes() > MAX_KEPT_BYTES {
            let smallest = (0..self.kept.len())
                .min_by_key(|&i| self.kept[i].capacity())
                .unwrap();
            self.kept.swap_remove(smallest);
        }
    }

    fn kept_bytes(&self) -> usize {
        self.kept.iter().map(Vec::capacity).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_is_taken_again_at_any_length_it_holds() {
        let mut pool = BufferPool::new(2);
        let buf = pool.take(1 << 20);
        let at = buf.as_ptr();
        pool.give(buf);
        let again = pool.take(1000);
        assert_eq!((again.as_ptr(), again.len()), (at, 1000));
        pool.give(again);
        let full = pool.take(1 << 20);
        assert_eq!((full.as_ptr(), full.len()), (at, 1 << 20));
    }

    #[test]
    fn the_smallest_fitting_buffer_is_taken() {
        let mut pool = BufferPool::new(2);
        let (big, small) = (pool.take(4096), pool.take(1024));
        let (big_at, small_at) = (big.as_ptr(), small.as_ptr());
        pool.give(big);
        pool.give(small);
        let (first, second) = (pool.take(512), pool.take(512));
        assert_eq!((first.as_ptr(), second.as_ptr()), (small_at, big_at));
    }

    #[test]
    fn a_full_pool_drops_its_smallest_buffer() {
        let mut pool = BufferPool::new(2);
        let bufs: Vec<Vec<u8>> = [1024, 4096, 2048].map(|n| pool.take(n)).into();
        let kept: Vec<*const u8> = bufs[1..].iter().map(|b| b.as_ptr()).collect();
        for b in bufs {
            pool.give(b);
        }
        assert_eq!(pool.kept.len(), 2);
        let mut left: Vec<*const u8> = pool.kept.iter().map(|b| b.as_ptr()).collect();
        left.sort();
        let mut want = kept;
        want.sort();
        assert_eq!(left, want);
    }

    #[test]
    fn the_kept_bytes_are_bounded() {
        let mut pool = BufferPool::new(8);
        for _ in 0..3 {
            pool.give(Vec::with_capacity(MAX_KEPT_BYTES / 2));
        }
        assert_eq!(pool.kept.len(), 2);
        pool.give(Vec::with_capacity(MAX_KEPT_BYTES + 1));
        assert_eq!(pool.kept.len(), 2);
    }

    #[test]
    fn a_pool_keeping_none_allocates_afresh() {
        let mut pool = BufferPool::new(KEEP_NONE);
        pool.give(vec![0; 64]);
        assert!(pool.kept.is_empty());
        assert_eq!(pool.take(64).len(), 64);
    }
}
