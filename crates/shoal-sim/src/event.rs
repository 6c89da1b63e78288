//! The event core: events are plain values (a time, a kind, an index into
//! the engine's own tables: links, flows, packets), kept in one binary heap
//! ordered by (time, insertion sequence). Ties therefore fire in the order
//! they were scheduled, which makes runs exactly reproducible.
//!
//! A radix heap (monotone keys) was tried in place of the binary heap and
//! measured no faster on the runs of docs/sim.md ("Speed"), so the simpler
//! structure stays.
//!
//! The heap stays small because engines feed it from per-link FIFOs: a link
//! puts only the head of its wire (the next packet to arrive) and its next
//! departure in the heap, never every packet in flight.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::units::Time;

/// One scheduled event: `kind` and `index` mean what the engine says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub time: Time,
    seq: u64,
    pub kind: u8,
    pub index: u32,
}

impl Ord for Event {
    /// Reversed (earliest first) so `BinaryHeap` pops the next event.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The global event queue with the simulation clock.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Event>,
    seq: u64,
    now: Time,
    /// Events popped so far (the figure reported as "events").
    pub popped: u64,
}

impl EventQueue {
    pub fn new() -> EventQueue {
        EventQueue::default()
    }

    /// The time of the event being handled (the last one popped).
    pub fn now(&self) -> Time {
        self.now
    }

    /// Schedules `kind`/`index` at `time`, which must not be in the past.
    pub fn schedule(&mut self, time: Time, kind: u8, index: u32) {
        debug_assert!(time >= self.now, "event scheduled in the past");
        self.seq += 1;
        self.heap.push(Event {
            time,
            seq: self.seq,
            kind,
            index,
        });
    }

    /// The next event, advancing the clock to its time.
    pub fn pop(&mut self) -> Option<Event> {
        let e = self.heap.pop()?;
        self.now = e.time;
        self.popped += 1;
        Some(e)
    }

    /// The next event if it is due no later than `until`.
    pub fn pop_before(&mut self, until: Time) -> Option<Event> {
        if self.heap.peek()?.time > until {
            return None;
        }
        self.pop()
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// A slab of values with a free list: slots are reused, so steady-state
/// simulation allocates nothing per packet.
#[derive(Debug)]
pub struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    pub fn insert(&mut self, value: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = value;
                i
            }
            None => {
                self.items.push(value);
                (self.items.len() - 1) as u32
            }
        }
    }

    /// Returns slot `i` to the free list (its value stays until reused).
    pub fn remove(&mut self, i: u32) {
        self.free.push(i);
    }

    pub fn live(&self) -> usize {
        self.items.len() - self.free.len()
    }

    /// Slots ever allocated: the high-water mark of live values.
    pub fn capacity(&self) -> usize {
        self.items.len()
    }
}

impl<T> std::ops::Index<u32> for Slab<T> {
    type Output = T;
    fn index(&self, i: u32) -> &T {
        &self.items[i as usize]
    }
}

impl<T> std::ops::IndexMut<u32> for Slab<T> {
    fn index_mut(&mut self, i: u32) -> &mut T {
        &mut self.items[i as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_pop_in_time_then_schedule_order() {
        let mut q = EventQueue::new();
        q.schedule(5, 0, 1);
        q.schedule(3, 0, 2);
        q.schedule(5, 0, 3);
        q.schedule(3, 0, 4);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|e| e.index).collect();
        assert_eq!(order, vec![2, 4, 1, 3]);
        assert_eq!((q.now(), q.popped), (5, 4));
    }

    #[test]
    fn the_queue_orders_like_a_sorted_list() {
        // Interleaved pushes and pops with colliding and distant times.
        let mut q = EventQueue::new();
        let mut model: Vec<(u64, u64, u32)> = Vec::new(); // (time, seq, index)
        let mut seq = 0;
        let mut x = 12345u64;
        for round in 0..2000u32 {
            x = crate::topology::mix(x);
            let now = q.now();
            for _ in 0..(x % 3) {
                x = crate::topology::mix(x);
                let t = now + [0, 1, 7, 1000, 1 << 40][(x % 5) as usize];
                seq += 1;
                q.schedule(t, 0, round);
                model.push((t, seq, round));
            }
            if round % 2 == 0 {
                model.sort();
                let want = (!model.is_empty()).then(|| model.remove(0));
                let got = q.pop().map(|e| (e.time, e.index));
                assert_eq!(got, want.map(|(t, _, i)| (t, i)));
            }
        }
        model.sort();
        let rest: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|e| (e.time, e.index))
            .collect();
        assert_eq!(
            rest,
            model.iter().map(|&(t, _, i)| (t, i)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn slab_reuses_freed_slots() {
        let mut s = Slab::default();
        let a = s.insert(1);
        let b = s.insert(2);
        s.remove(a);
        let c = s.insert(3);
        assert_eq!(c, a);
        assert_eq!((s[b], s[c], s.live(), s.capacity()), (2, 3, 2, 2));
    }
}
