//! The window of a DCTCP sender (Alizadeh et al., SIGCOMM 2010) with
//! go-back-N recovery. Kept apart from the engine so the rules read as in
//! the paper: per ACK, grow (slow start, then +1/cwnd); once per window,
//! fold the fraction of ECN-marked ACKs into `alpha` with gain `g`; on the
//! first marked ACK of a window, `cwnd *= 1 - alpha/2`.

use crate::units::Time;

/// Sender parameters shared by every flow of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpConfig {
    /// DCTCP's EWMA gain `g` (default 1/16, the paper's and Linux's).
    pub g: f64,
    /// Initial window in packets (default 10, RFC 6928).
    pub init_cwnd: f64,
    /// Lower bound of the retransmission timeout (default 1 ms).
    pub min_rto: Time,
}

impl Default for TcpConfig {
    fn default() -> TcpConfig {
        TcpConfig {
            g: 1.0 / 16.0,
            init_cwnd: 10.0,
            min_rto: crate::units::PS_PER_MS,
        }
    }
}

/// Congestion state of one sender; sequence numbers count packets.
#[derive(Clone, Debug)]
pub struct Window {
    pub cwnd: f64,
    pub ssthresh: f64,
    /// DCTCP's estimate of the fraction of marked packets.
    pub alpha: f64,
    /// Upper bound on `cwnd` (INA's `cwnd_cap`; infinity for TCP).
    pub cap: f64,
    /// End of the current observation window (a sequence number).
    win_end: u32,
    win_acked: u32,
    win_marked: u32,
    /// No further reduction until this sequence is acknowledged.
    cwr_end: u32,
    pub dupacks: u32,
    /// Fast retransmit happens once until this sequence is acknowledged.
    recover: u32,
    pub srtt: Time,
    pub rttvar: Time,
}

/// What the engine must do after an acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckAction {
    /// Send what the window now allows.
    Send,
    /// Third duplicate: go back to the first unacknowledged packet.
    GoBack,
}

impl Window {
    pub fn new(cfg: &TcpConfig) -> Window {
        Window {
            cwnd: cfg.init_cwnd,
            ssthresh: f64::INFINITY,
            alpha: 0.0,
            cap: f64::INFINITY,
            win_end: 0,
            win_acked: 0,
            win_marked: 0,
            cwr_end: 0,
            dupacks: 0,
            recover: 0,
            srtt: 0,
            rttvar: 0,
        }
    }

    /// Packets the window allows in flight.
    pub fn allowed(&self) -> u32 {
        self.cwnd.min(self.cap).max(1.0) as u32
    }

    /// An ACK for everything below `ack` (`newly` packets newly acked),
    /// `marked` if it echoes ECN; `next_seq` is the sender's next sequence.
    pub fn on_ack(
        &mut self,
        cfg: &TcpConfig,
        ack: u32,
        newly: u32,
        marked: bool,
        next_seq: u32,
    ) -> AckAction {
        if newly == 0 {
            self.dupacks += 1;
            if self.dupacks == 3 && ack >= self.recover {
                self.recover = next_seq;
                self.ssthresh = (self.cwnd / 2.0).max(2.0);
                self.cwnd = self.ssthresh;
                return AckAction::GoBack;
            }
            return AckAction::Send;
        }
        self.dupacks = 0;
        self.win_acked += newly;
        if marked {
            self.win_marked += newly;
        }
        if ack >= self.win_end {
            let f = self.win_marked as f64 / self.win_acked.max(1) as f64;
            self.alpha = (1.0 - cfg.g) * self.alpha + cfg.g * f;
            self.win_acked = 0;
            self.win_marked = 0;
            self.win_end = next_seq;
        }
        if marked && ack >= self.cwr_end {
            self.cwnd = (self.cwnd * (1.0 - self.alpha / 2.0)).max(1.0);
            self.ssthresh = self.cwnd;
            self.cwr_end = next_seq;
        } else if self.cwnd < self.ssthresh {
            self.cwnd += newly as f64;
        } else {
            self.cwnd += newly as f64 / self.cwnd;
        }
        // A window above the cap cannot be used; keep it within reach so a
        // raised cap is not met by a burst.
        self.cwnd = self.cwnd.min(self.cap.max(1.0) * 2.0);
        AckAction::Send
    }

    /// A retransmission timeout: back to one packet.
    pub fn on_timeout(&mut self, next_seq: u32) {
        self.ssthresh = (self.cwnd / 2.0).max(2.0);
        self.cwnd = 1.0;
        self.recover = next_seq;
        self.dupacks = 0;
    }

    /// Folds one round-trip sample into the smoothed RTT (RFC 6298).
    pub fn on_rtt(&mut self, sample: Time) {
        if self.srtt == 0 {
            self.srtt = sample;
            self.rttvar = sample / 2;
        } else {
            let diff = self.srtt.abs_diff(sample);
            self.rttvar = (3 * self.rttvar + diff) / 4;
            self.srtt = (7 * self.srtt + sample) / 8;
        }
    }

    pub fn rto(&self, cfg: &TcpConfig) -> Time {
        (self.srtt + 4 * self.rttvar).max(cfg.min_rto)
    }
}
