//! Test knob: duplicate and reorder outgoing packets, to show that the
//! protocol still gives exact results. Off unless configured.

use std::net::{SocketAddr, UdpSocket};

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

impl Injector {
    pub fn new(cfg: Faults) -> Injector {
        Injector {
            cfg,
            rng: Rng::new(cfg.seed),
            held: None,
        }
    }

    pub fn send(&mut self, sock: &UdpSocket, pkt: &[u8], to: SocketAddr) {
        if self.cfg == Faults::default() {
            let _ = sock.send_to(pkt, to);
            return;
        }
        if self.held.is_none() && self.rng.chance(self.cfg.reorder) {
            self.held = Some((pkt.to_vec(), to));
            return;
        }
        let _ = sock.send_to(pkt, to);
        if self.rng.chance(self.cfg.duplicate) {
            let _ = sock.send_to(pkt, to);
        }
        self.flush(sock);
    }

    /// Sends a held-back packet (before waiting for results).
    pub fn flush(&mut self, sock: &UdpSocket) {
        if let Some((p, to)) = self.held.take() {
            let _ = sock.send_to(&p, to);
        }
    }
}
