//! Test knob: duplicate and reorder outgoing packets, to show that the
//! protocol still gives exact results. Off unless configured.

use std::net::SocketAddr;

use crate::net::Batch;
use crate::rng::Rng;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// Probability that a packet is sent twice.
    pub duplicate: f64,
    /// Probability that a packet is held back and sent after the next one.
    pub reorder: f64,
    pub seed: u64,
}

pub struct Injector {
    cfg: Faults,
    rng: Rng,
    held: Option<(Vec<u8>, SocketAddr)>,
}

/// Datagrams one queued packet may turn into (itself, a duplicate and a
/// held-back one): the free room a send batch needs before each packet.
pub const MAX_FANOUT: usize = 3;

impl Injector {
    pub fn new(cfg: Faults) -> Injector {
        Injector {
            cfg,
            rng: Rng::new(cfg.seed),
            held: None,
        }
    }

    /// Applies the faults to the packet just queued (last) in `tx` for `to`:
    /// it may be taken back to be sent after the next one, or repeated.
    pub fn on_queued(&mut self, tx: &mut Batch, to: SocketAddr) {
        if self.cfg == Faults::default() {
            return;
        }
        if self.held.is_none() && self.rng.chance(self.cfg.reorder) {
            self.held = tx.pop();
            return;
        }
        if self.rng.chance(self.cfg.duplicate) {
            tx.repeat_last(to);
        }
        self.flush(tx);
    }

    /// Queues a held-back packet (before waiting for results).
    pub fn flush(&mut self, tx: &mut Batch) {
        if let Some((p, to)) = self.held.take() {
            tx.push(&p, to);
        }
    }
}
