//! PFC (IEEE 802.1Qbb priority flow control, one priority): a lossless
//! fabric. A switch counts, per input link, the bytes that arrived on it
//! and still wait in one of its output queues; when that count reaches
//! `xoff` it sends PAUSE upstream, and when it falls to `xon`, RESUME. The
//! frame takes the link's latency to arrive; the upstream port then stops
//! (resumes) starting packets, the one on the wire finishes. Switch output
//! queues do not drop while PFC is on: the headroom above `xoff` (what
//! arrives during one round trip of the link) is assumed, and
//! [`PacketSim::ingress_peak`] shows how much was used.
//!
//! Aggregation packets are absorbed into the switch's aggregation memory
//! (whose use PANAMA's window cap bounds), not into the ingress count; they
//! are paused with everything else on a paused port.

use super::{PacketSim, PFC_PAUSE, PFC_RESUME};
use crate::units::Time;

/// Per-port thresholds of the ingress count, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcConfig {
    /// PAUSE when an input link's bytes in the switch reach this.
    pub xoff: u64,
    /// RESUME when they fall to this.
    pub xon: u64,
}

impl PfcConfig {
    /// Our choice, the paper being silent: `xoff` = half the port buffer
    /// (300 KB = 200 full packets at the default 600 KB), above the ECN
    /// threshold (85 packets) so that DCTCP slows down before PFC pauses,
    /// as DCQCN (Zhu et al., SIGCOMM 2015, section 5) requires of the two
    /// thresholds; `xon` two full packets lower, the hysteresis that keeps
    /// one packet from toggling the pause.
    pub fn for_buffer(buffer: u64) -> PfcConfig {
        let xoff = buffer / 2;
        PfcConfig {
            xoff,
            xon: xoff.saturating_sub(3000),
        }
    }
}

/// PFC counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PfcStats {
    /// PAUSE frames sent.
    pub pauses: u64,
    /// Links paused at least once (congestion spreading).
    pub links_paused: u64,
    /// Sum over links of the time each was paused, ps.
    pub paused_ps: u64,
}

/// Per-link PFC state: the downstream switch's ingress count and whether
/// it has asked for a pause; the upstream port's pause and its history.
#[derive(Clone, Debug, Default)]
pub(super) struct PfcLink {
    pub ingress_bytes: u64,
    pub ingress_peak: u64,
    pub pause_sent: bool,
    pub paused: bool,
    pub paused_since: Time,
    pub paused_ps: Time,
    pub pauses: u64,
}

impl PacketSim {
    /// A packet arrived on `link` at a switch and will wait there: count it.
    pub(super) fn pfc_arrived(&mut self, link: u32, p: u32) {
        let Some(cfg) = self.cfg.pfc else { return };
        let wire = self.packets[p].wire as u64;
        self.packets[p].ingress = link + 1;
        let state = &mut self.pfc[link as usize];
        state.ingress_bytes += wire;
        state.ingress_peak = state.ingress_peak.max(state.ingress_bytes);
        if !state.pause_sent && state.ingress_bytes >= cfg.xoff {
            state.pause_sent = true;
            state.pauses += 1;
            let at = self.now() + self.ports[link as usize].latency;
            self.queue.schedule(at, PFC_PAUSE, link);
        }
    }

    /// Packet `p` left its switch: uncount it from its input link.
    pub(super) fn pfc_left(&mut self, p: u32) {
        let Some(cfg) = self.cfg.pfc else { return };
        let pkt = &mut self.packets[p];
        if pkt.ingress == 0 {
            return;
        }
        let link = pkt.ingress - 1;
        pkt.ingress = 0;
        let state = &mut self.pfc[link as usize];
        state.ingress_bytes -= pkt.wire as u64;
        if state.pause_sent && state.ingress_bytes <= cfg.xon {
            state.pause_sent = false;
            let at = self.now() + self.ports[link as usize].latency;
            self.queue.schedule(at, PFC_RESUME, link);
        }
    }

    /// A PAUSE frame reached the upstream end of `link`.
    pub(super) fn pfc_pause(&mut self, link: u32) {
        let now = self.now();
        let state = &mut self.pfc[link as usize];
        state.paused = true;
        state.paused_since = now;
        self.ports[link as usize].paused = true;
    }

    /// A RESUME frame reached the upstream end of `link`: start what waits.
    pub(super) fn pfc_resume(&mut self, link: u32) {
        let now = self.now();
        let state = &mut self.pfc[link as usize];
        state.paused = false;
        state.paused_ps += now - state.paused_since;
        self.ports[link as usize].paused = false;
        self.start_port(link);
    }

    /// Most bytes an input link ever had waiting in its switch, per link
    /// (0 without PFC): at most `xoff` plus what arrives in one round trip
    /// of the link if the headroom suffices.
    pub fn ingress_peak(&self) -> Vec<u64> {
        self.pfc.iter().map(|s| s.ingress_peak).collect()
    }

    /// Time each link was paused by PFC, ps (up to now).
    pub fn link_paused_time(&self) -> Vec<Time> {
        let now = self.now();
        self.pfc
            .iter()
            .map(|s| s.paused_ps + if s.paused { now - s.paused_since } else { 0 })
            .collect()
    }

    pub fn pfc_stats(&self) -> PfcStats {
        let paused = self.link_paused_time();
        PfcStats {
            pauses: self.pfc.iter().map(|s| s.pauses).sum(),
            links_paused: self.pfc.iter().filter(|s| s.pauses > 0).count() as u64,
            paused_ps: paused.iter().sum(),
        }
    }
}
