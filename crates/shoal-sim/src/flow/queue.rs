//! The flow engine's event queue: a radix heap on the time bits with an
//! exact tie order.
//!
//! Event times never go backwards (a new event is at or after the last one
//! popped), and non-negative f64 seconds order like their bit patterns, so
//! a radix heap applies: an entry sits in the bucket of the highest bit in
//! which its time differs from the last popped time, and a pop only sorts
//! out the lowest non-empty bucket. Entries *at* the last popped time wait
//! in a small binary heap on their packed kind, so equal times pop in the
//! same (kind, id) order as a binary heap on (time, kind) would: the
//! results are identical, the cost per pop no longer grows with the number
//! of pending events (a 1024-rank collective keeps a thousand in flight).

pub struct EventQueue {
    /// Time bits of the last pop (every entry is at or after it).
    last: u64,
    /// Kinds of the entries at exactly `last`, sorted largest first.
    now: Vec<u64>,
    /// `buckets[b]`: entries whose time differs from `last` first in bit
    /// `b` (counting from 0 at the least significant).
    buckets: [Vec<(u64, u64)>; 64],
    /// Bit `b` set: `buckets[b]` is not empty. The lowest non-empty bucket
    /// is one `trailing_zeros` instead of a walk over the 64 (at 1024
    /// ranks the events are ~30 buckets up, and every pop looked for it).
    occupied: u64,
    len: usize,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            last: 0,
            now: Vec::new(),
            buckets: std::array::from_fn(|_| Vec::new()),
            occupied: 0,
            len: 0,
        }
    }
}

impl EventQueue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds an entry at time bits `time` (>= the last pop) with packed kind `kind`.
    pub fn push(&mut self, time: u64, kind: u64) {
        debug_assert!(time >= self.last, "events never go back in time");
        self.len += 1;
        if time == self.last {
            // Usually the largest kind scheduled at this instant is popped
            // last: a search from the end finds its place.
            let at = self.now.partition_point(|&k| k > kind);
            self.now.insert(at, kind);
        } else {
            self.push_later(time, kind);
        }
    }

    /// Whether entries wait at the time of the last pop (the caller's
    /// present): its instant is not over yet. Every other entry is later.
    pub fn has_present(&self) -> bool {
        !self.now.is_empty()
    }

    /// The time bits of the earliest entry. Moves nothing: the caller may
    /// still push entries before that time (but not before the last pop).
    pub fn peek_time(&self) -> Option<u64> {
        if !self.now.is_empty() {
            return Some(self.last);
        }
        let b = self.lowest_bucket()?;
        self.buckets[b].iter().map(|e| e.0).min()
    }

    /// Removes the earliest entry (smallest kind first among equal times).
    pub fn pop(&mut self) -> Option<(u64, u64)> {
        if self.now.is_empty() && !self.refill() {
            return None;
        }
        self.len -= 1;
        self.now.pop().map(|kind| (self.last, kind))
    }

    /// Moves the earliest time's entries into `now`, redistributing the
    /// rest of their bucket; false when the queue is empty.
    fn refill(&mut self) -> bool {
        let Some(b) = self.lowest_bucket() else {
            return false;
        };
        let entries = std::mem::take(&mut self.buckets[b]);
        self.occupied &= !(1 << b);
        self.last = entries.iter().map(|e| e.0).min().expect("bucket not empty");
        for &(time, kind) in &entries {
            if time == self.last {
                self.now.push(kind);
            } else {
                self.push_later(time, kind);
            }
        }
        self.now.sort_unstable_by(|a, b| b.cmp(a));
        // Hand the allocation back so the bucket does not reallocate.
        let mut entries = entries;
        entries.clear();
        if self.buckets[b].is_empty() {
            self.buckets[b] = entries;
        }
        true
    }

    fn lowest_bucket(&self) -> Option<usize> {
        (self.occupied != 0).then(|| self.occupied.trailing_zeros() as usize)
    }

    /// Files an entry later than `last` in its bucket.
    fn push_later(&mut self, time: u64, kind: u64) {
        let b = bucket(time, self.last);
        self.buckets[b].push((time, kind));
        self.occupied |= 1 << b;
    }
}

/// The bucket of `time` relative to `last` (they differ).
fn bucket(time: u64, last: u64) -> usize {
    63 - (time ^ last).leading_zeros() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[test]
    fn pops_in_time_then_kind_order_like_a_binary_heap() {
        let mut q = EventQueue::default();
        let mut reference = BinaryHeap::new();
        let mut x: u64 = 12345;
        let mut now = 0.0f64;
        for round in 0..2000 {
            for _ in 0..(round % 5) {
                x = crate::topology::mix(x);
                // Some at exactly now, most later.
                let dt = if x.is_multiple_of(4) {
                    0.0
                } else {
                    (x % 1000) as f64 * 1e-9
                };
                let t = (now + dt).to_bits();
                let kind = x >> 40;
                q.push(t, kind);
                reference.push(Reverse((t, kind)));
            }
            if let Some(t) = q.peek_time() {
                assert_eq!(Some(t), reference.peek().map(|Reverse(e)| e.0));
            }
            let at_now = reference
                .peek()
                .is_some_and(|Reverse(e)| e.0 == now.to_bits());
            assert_eq!(q.has_present(), at_now);
            if round % 3 != 0 {
                let got = q.pop();
                let want = reference.pop().map(|Reverse(e)| e);
                assert_eq!(got, want);
                if let Some((t, _)) = got {
                    now = f64::from_bits(t);
                }
            }
        }
        while let Some(Reverse(want)) = reference.pop() {
            assert_eq!(q.pop(), Some(want));
        }
        assert!(q.is_empty() && q.pop().is_none());
    }
}
