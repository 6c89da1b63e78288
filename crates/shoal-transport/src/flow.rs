//! Flow control: a receiver holds at most a window of one peer's messages
//! that arrived before their receive was posted.
//!
//! A sender spends credit on every message it sends eagerly (the payload
//! travels with its header): its length plus [`OVERHEAD`]. A message that
//! does not fit the credit left goes by rendezvous instead: only its header
//! travels, and the payload follows once a receive has matched it, so it is
//! never held by the receiver. The receiver gives credit back as eager
//! messages leave its memory: at once when a posted receive takes the
//! payload, else when a late receive takes it from the unexpected queue (or
//! it is dropped). It gives back in batches of at least a quarter of the
//! window, so a steady stream costs one small control frame per quarter
//! window, not one per message.
//!
//! The sender never waits for credit: out of credit, its message takes the
//! rendezvous path, which completes once the receiver takes it. A rank that
//! runs ahead therefore waits for its receiver as it would under MPI's
//! rendezvous protocol, and a rank's unexpected payloads from one peer stay
//! below the window (`SHOAL_UNEXPECTED_BYTES`) whatever the peer does.
//!
//! Collective messages may also be held to a smaller run-ahead budget
//! ([`Flow::limit_run_ahead`]): one goes eagerly only while less than the
//! budget of the peer's credit is out. A collective's root waits for nobody,
//! so back to back it would otherwise run a window ahead of its receiver,
//! whose early payloads then miss its caches and take a copy more
//! (`SHOAL_SHM_AHEAD_BYTES`, docs/benchmarks.md). Point-to-point messages
//! keep the whole window: a program may send them before it receives.

use std::collections::HashMap;

/// What each message costs beyond its payload: an unexpected message also
/// holds a queue entry, so a flood of empty messages is bounded too.
pub const OVERHEAD: usize = 64;

/// Default window per peer (`SHOAL_UNEXPECTED_BYTES`): large enough that
/// two ranks that both send a 4 MiB message before receiving the other's
/// (tests/workers/api.py) still do not wait for each other; at least three
/// quarters of it is free whenever the receiver has taken what came.
pub const DEFAULT_WINDOW: usize = 16 << 20;

/// Both sides of the credit of one transport, per peer.
pub(crate) struct Flow {
    window: usize,
    /// The most credit out to a peer under which a collective message
    /// still goes eagerly (`window`: no budget of its own).
    ahead: usize,
    /// Sender side: credit left per peer (absent: a full window).
    left: HashMap<usize, usize>,
    /// Receiver side: credit freed per peer and not given back yet.
    owed: HashMap<usize, usize>,
    /// Credit to give back now: (peer, bytes), for the transport to send.
    due: Vec<(usize, u64)>,
}

impl Flow {
    /// `window == usize::MAX`: no flow control (every message goes eagerly
    /// and no credit is ever given back).
    pub fn new(window: usize) -> Flow {
        Flow {
            window,
            ahead: window,
            left: HashMap::new(),
            owed: HashMap::new(),
            due: Vec::new(),
        }
    }

    pub fn unlimited() -> Flow {
        Flow::new(usize::MAX)
    }

    /// Holds collective messages to `ahead` bytes of credit out per peer
    /// (at most the window). Both sides must agree: the receiver gives
    /// credit back in batches of at most half of it, so a sender held back
    /// always gets credit again once its receiver has taken what came.
    pub fn limit_run_ahead(&mut self, ahead: usize) {
        self.ahead = ahead.min(self.window);
    }

    fn limited(&self) -> bool {
        self.window != usize::MAX
    }

    /// What a `len`-byte message costs.
    pub fn cost(len: usize) -> usize {
        len.saturating_add(OVERHEAD)
    }

    /// Sender: spends the credit of a `len`-byte message to `peer` if there
    /// is enough (the message may go eagerly), else spends nothing. A
    /// `collective` message also needs less than the run-ahead budget out,
    /// so a call's first message goes eagerly whatever its size.
    pub fn spend(&mut self, peer: usize, len: usize, collective: bool) -> bool {
        if !self.limited() {
            return true;
        }
        let left = self.left.entry(peer).or_insert(self.window);
        let cost = Flow::cost(len);
        if cost > *left || (collective && self.window - *left >= self.ahead) {
            return false;
        }
        *left -= cost;
        true
    }

    /// Sender: `peer` gave `bytes` of credit back.
    pub fn refund(&mut self, peer: usize, bytes: u64) {
        if !self.limited() {
            return;
        }
        let left = self.left.entry(peer).or_insert(self.window);
        // (a confused or hostile peer cannot raise the credit above the window)
        *left = left
            .saturating_add(usize::try_from(bytes).unwrap_or(usize::MAX))
            .min(self.window);
    }

    /// Receiver: an eager `len`-byte message from `peer` no longer takes
    /// memory here; its credit is given back once a batch has built up.
    pub fn free(&mut self, peer: usize, len: usize) {
        if !self.limited() {
            return;
        }
        let owed = self.owed.entry(peer).or_insert(0);
        *owed = owed.saturating_add(Flow::cost(len));
        if *owed >= (self.window / 4).min(self.ahead / 2) {
            self.due.push((peer, *owed as u64));
            *owed = 0;
        }
    }

    /// Credit to give back now, as (peer, bytes).
    pub fn take_due(&mut self) -> Vec<(usize, u64)> {
        std::mem::take(&mut self.due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_spends_at_most_the_window_until_credit_comes_back() {
        let mut f = Flow::new(1000);
        assert!(f.spend(1, 400 - OVERHEAD, false));
        assert!(f.spend(1, 400 - OVERHEAD, false));
        assert!(!f.spend(1, 400 - OVERHEAD, false), "only 200 left");
        assert!(f.spend(2, 900, false), "each peer has its own window");
        f.refund(1, 400);
        assert!(f.spend(1, 400 - OVERHEAD, false));
        f.refund(1, u64::MAX);
        assert!(
            f.spend(1, 1000 - OVERHEAD, false),
            "refunds stop at the window"
        );
        assert!(!f.spend(1, 0, false));
    }

    #[test]
    fn a_message_larger_than_the_window_never_goes_eagerly() {
        let mut f = Flow::new(1000);
        assert!(!f.spend(1, 1000, false));
        assert!(f.spend(1, 1000 - OVERHEAD, false));
    }

    #[test]
    fn a_receiver_gives_credit_back_in_quarter_window_batches() {
        let mut f = Flow::new(1000);
        f.free(3, 100);
        assert!(f.take_due().is_empty(), "164 < 250");
        f.free(3, 100);
        assert_eq!(f.take_due(), vec![(3, 328)]);
        assert!(f.take_due().is_empty());
    }

    #[test]
    fn collective_messages_run_ahead_only_within_their_budget() {
        let mut f = Flow::new(1000);
        f.limit_run_ahead(300);
        assert!(
            f.spend(1, 500, true),
            "a first message goes whatever its size"
        );
        assert!(!f.spend(1, 10, true), "564 out of a budget of 300");
        assert!(f.spend(1, 100, false), "point-to-point keeps the window");
        assert!(f.spend(2, 10, true), "each peer has its own budget");
        f.refund(1, 564);
        assert!(f.spend(1, 10, true), "164 out");
    }

    #[test]
    fn credit_comes_back_in_batches_of_half_the_run_ahead_budget() {
        let mut f = Flow::new(1000);
        f.limit_run_ahead(300);
        f.free(3, 50);
        assert!(f.take_due().is_empty(), "114 < 150");
        f.free(3, 50);
        assert_eq!(f.take_due(), vec![(3, 228)]);
        f.limit_run_ahead(5000);
        f.free(3, 200);
        assert_eq!(f.take_due(), vec![(3, 264)], "a quarter window at most");
    }

    #[test]
    fn unlimited_flow_always_sends_eagerly_and_owes_nothing() {
        let mut f = Flow::unlimited();
        assert!(f.spend(1, usize::MAX, true));
        f.free(1, 1 << 40);
        assert!(f.take_due().is_empty());
    }
}
