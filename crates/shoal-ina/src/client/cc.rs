//! Congestion control of one aggregation tree: PANAMA's DCTCP-like window,
//! where each result is the acknowledgement, ECN marks OR-ed through the
//! aggregation cut the window by `alpha / 2`, and the switch's `cwnd_cap`
//! (its memory share) is a hard ceiling. Like DCTCP over TCP it starts in
//! slow start (one more packet per result, doubling per round trip) until
//! the first mark or timeout, then grows by one packet per round trip.
//! Plus the retransmission timer.

use std::time::Duration;

/// DCTCP's EWMA gain.
const G: f64 = 1.0 / 16.0;

pub struct Window {
    cwnd: f64,
    /// Slow start below this; infinite until the first congestion signal.
    ssthresh: f64,
    alpha: f64,
    /// min(switch cwnd_cap, slot-pool limit of the tree).
    cap: f64,
    limit: f64,
    acks: u32,
    marks: u32,
    cut_since_timeout: bool,
}

impl Window {
    pub fn new(init: u16, cap: u16, limit: u16) -> Window {
        let limit = limit.max(1) as f64;
        let cap = (cap.max(1) as f64).min(limit);
        Window {
            cwnd: (init.max(1) as f64).min(cap),
            ssthresh: f64::INFINITY,
            alpha: 0.0,
            cap,
            limit,
            acks: 0,
            marks: 0,
            cut_since_timeout: false,
        }
    }

    /// Packets that may be outstanding now.
    pub fn allowed(&self) -> usize {
        self.cwnd.max(1.0) as usize
    }

    /// The most packets the window ever allows (the tree's smallest slot
    /// pool, or this host's receive buffer).
    pub fn limit(&self) -> usize {
        self.limit as usize
    }

    /// A result arrived: slow start or additive increase, or a DCTCP cut
    /// once per window of results that saw marks.
    pub fn on_result(&mut self, ecn: bool, cwnd_cap: u16) {
        self.cap = (cwnd_cap.max(1) as f64).min(self.limit);
        self.acks += 1;
        if ecn {
            self.marks += 1;
            self.ssthresh = self.ssthresh.min(self.cwnd);
        } else if self.cwnd < self.ssthresh {
            self.cwnd += 1.0;
        } else {
            self.cwnd += 1.0 / self.cwnd;
        }
        if self.acks as f64 >= self.cwnd {
            let frac = self.marks as f64 / self.acks as f64;
            self.alpha = (1.0 - G) * self.alpha + G * frac;
            if self.marks > 0 {
                self.cwnd *= 1.0 - self.alpha / 2.0;
                self.ssthresh = self.cwnd;
            }
            self.acks = 0;
            self.marks = 0;
        }
        self.cut_since_timeout = false;
        self.cwnd = self.cwnd.clamp(1.0, self.cap);
    }

    /// A retransmission timeout: halve, at most once until results flow
    /// again, and slow-start back to the window before. Congestion is
    /// signalled by ECN (switch memory and queue); a timeout is a loss or,
    /// on shared hosts, often just a member descheduled past the timer, so
    /// it must not cost hundreds of round trips of additive regrowth.
    pub fn on_timeout(&mut self) {
        if !self.cut_since_timeout {
            self.ssthresh = self.cwnd;
            self.cwnd = (self.cwnd / 2.0).max(1.0);
            self.cut_since_timeout = true;
        }
    }
}

/// Jacobson/Karels retransmission timeout from result round-trip samples.
pub struct Rto {
    srtt: Option<f64>,
    rttvar: f64,
    initial: Duration,
    min: Duration,
    max: Duration,
}

impl Rto {
    pub fn new(initial: Duration, min: Duration, max: Duration) -> Rto {
        Rto {
            srtt: None,
            rttvar: 0.0,
            initial,
            min,
            max,
        }
    }

    pub fn sample(&mut self, rtt: Duration) {
        let r = rtt.as_secs_f64();
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2.0;
            }
            Some(s) => {
                self.rttvar = 0.75 * self.rttvar + 0.25 * (s - r).abs();
                self.srtt = Some(0.875 * s + 0.125 * r);
            }
        }
    }

    pub fn current(&self) -> Duration {
        match self.srtt {
            None => self.initial,
            Some(s) => Duration::from_secs_f64(s + 4.0 * self.rttvar).clamp(self.min, self.max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_until_congestion() {
        let mut w = Window::new(4, 1000, 1000);
        for _ in 0..4 + 8 + 16 {
            w.on_result(false, 1000);
        }
        assert_eq!(w.allowed(), 32); // three round trips: 4 -> 8 -> 16 -> 32
        w.on_timeout();
        assert_eq!(w.allowed(), 16);
        for _ in 0..16 {
            w.on_result(false, 1000);
        }
        assert_eq!(w.allowed(), 32); // back to the window before the timeout
        for _ in 0..32 {
            w.on_result(false, 1000);
        }
        assert_eq!(w.allowed(), 32); // additive from there: +1 per window
        for _ in 0..2000 {
            w.on_result(true, 1000);
        }
        let cut = w.allowed();
        assert!(cut < 16);
        for _ in 0..4 * cut {
            w.on_result(false, 1000);
        }
        assert!(w.allowed() <= cut + 4, "no slow start after ECN");
    }

    #[test]
    fn grows_cuts_and_respects_cap() {
        let mut w = Window::new(4, 64, 128);
        // additive increase: about one packet per window of results
        for _ in 0..5000 {
            w.on_result(false, 64);
        }
        assert_eq!(w.allowed(), 64);
        // alpha ramps up through the EWMA, so cuts start gently
        for _ in 0..2000 {
            w.on_result(true, 64);
        }
        assert!(w.allowed() < 32);
        w.on_result(false, 3);
        assert!(w.allowed() <= 3);
    }
}
