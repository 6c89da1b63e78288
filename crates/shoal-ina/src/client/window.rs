//! The per-tree send window of one collective call: which chunks are sent,
//! acknowledged (their result arrived) or due for retransmission.
//!
//! Chunk `k` of a call travels as sequence number `base + k`. The window only
//! slides past results, so a rank never has more than `cwnd` sequence numbers
//! outstanding; with `cwnd <= slots` a slot's previous use is always finished
//! when its next use is sent (the switch's shadow-copy invariant).

use std::time::{Duration, Instant};

pub struct SendWindow {
    pub base: u32,
    count: usize,
    next: usize,
    lo: usize,
    done: Vec<bool>,
    sent_at: Vec<Option<Instant>>,
    retx: Vec<bool>,
    remaining: usize,
}

impl SendWindow {
    pub fn new(base: u32, count: usize) -> SendWindow {
        SendWindow {
            base,
            count,
            next: 0,
            lo: 0,
            done: vec![false; count],
            sent_at: vec![None; count],
            retx: vec![false; count],
            remaining: count,
        }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn is_done(&self) -> bool {
        self.remaining == 0
    }

    /// The next chunk to send for the first time, if the window allows.
    pub fn next_to_send(&mut self, cwnd: usize) -> Option<usize> {
        while self.next < self.count && self.done[self.next] {
            self.next += 1;
        }
        (self.next < self.count && self.next < self.lo + cwnd).then_some(self.next)
    }

    pub fn on_sent(&mut self, k: usize, now: Instant) {
        self.sent_at[k] = Some(now);
        if k == self.next {
            self.next += 1;
        }
    }

    /// Chunk index of a result, if it is one this call still needs.
    pub fn accept(&self, seq: u32) -> Option<usize> {
        let k = seq.wrapping_sub(self.base) as usize;
        (k < self.count && !self.done[k]).then_some(k)
    }

    /// Marks chunk `k` done; returns a round-trip sample unless it was
    /// retransmitted (Karn's rule).
    pub fn on_result(&mut self, k: usize, now: Instant) -> Option<Duration> {
        self.done[k] = true;
        self.remaining -= 1;
        while self.lo < self.count && self.done[self.lo] {
            self.lo += 1;
        }
        match (self.sent_at[k], self.retx[k]) {
            (Some(t), false) => Some(now.duration_since(t)),
            _ => None,
        }
    }

    /// Fast retransmission (RACK-like): every member sends in sequence order,
    /// so when the result of chunk `k` arrives, a chunk sent before `k` and
    /// still without result was most likely lost somewhere. Those are marked
    /// resent now and returned, instead of waiting for the timeout.
    pub fn take_overtaken(&mut self, k: usize, sent: Instant, now: Instant, out: &mut Vec<usize>) {
        out.clear();
        for j in self.lo..k {
            match self.sent_at[j] {
                Some(t) if !self.done[j] && t < sent => {
                    self.sent_at[j] = Some(now);
                    self.retx[j] = true;
                    out.push(j);
                }
                _ => {}
            }
        }
    }

    pub fn sent_at(&self, k: usize) -> Option<Instant> {
        self.sent_at[k]
    }

    /// Sent chunks whose result is overdue; they are marked as resent now.
    pub fn take_expired(&mut self, now: Instant, rto: Duration, out: &mut Vec<usize>) {
        out.clear();
        for k in self.lo..self.next.min(self.count) {
            if self.done[k] {
                continue;
            }
            if let Some(t) = self.sent_at[k] {
                if now.duration_since(t) >= rto {
                    self.sent_at[k] = Some(now);
                    self.retx[k] = true;
                    out.push(k);
                }
            }
        }
    }
}
