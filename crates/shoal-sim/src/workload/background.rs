//! Background traffic: Poisson flow arrivals at a target load between
//! uniformly random host pairs, sizes drawn from a flow-size CDF (PANAMA
//! section 7: "exponential inter-arrival times ... sources and
//! destinations chosen uniformly").

use std::fmt;

use super::cdf::FlowSizeCdf;
use super::rng::Rng;

/// One background flow to inject.
#[derive(Clone, Debug, PartialEq)]
pub struct BackgroundFlow {
    pub start_s: f64,
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
}

/// Background traffic that cannot be generated, naming the value refused.
#[derive(Clone, Debug, PartialEq)]
pub enum TrafficError {
    /// Fewer than two hosts: no pair to send between.
    TooFewHosts(u32),
    /// A load outside (0, 1].
    Load(f64),
    /// A host link rate that is not positive, bit/s.
    HostRate(f64),
}

impl fmt::Display for TrafficError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrafficError::TooFewHosts(hosts) => {
                write!(f, "background traffic needs at least 2 hosts, got {hosts}")
            }
            TrafficError::Load(load) => {
                write!(f, "background load must be in (0, 1], got {load}")
            }
            TrafficError::HostRate(bps) => {
                write!(f, "host link speed must be positive, got {bps} bit/s")
            }
        }
    }
}

impl std::error::Error for TrafficError {}

/// Poisson traffic offering `load` of every host's link on average.
#[derive(Clone, Debug)]
pub struct PoissonTraffic {
    pub hosts: u32,
    pub host_bps: f64,
    /// Fraction of the aggregate host link capacity, in (0, 1].
    pub load: f64,
    pub sizes: FlowSizeCdf,
}

impl PoissonTraffic {
    pub fn new(
        hosts: u32,
        host_bps: f64,
        load: f64,
        sizes: FlowSizeCdf,
    ) -> Result<Self, TrafficError> {
        if hosts < 2 {
            return Err(TrafficError::TooFewHosts(hosts));
        }
        if load.is_nan() || load <= 0.0 || load > 1.0 {
            return Err(TrafficError::Load(load));
        }
        if host_bps.is_nan() || host_bps <= 0.0 {
            return Err(TrafficError::HostRate(host_bps));
        }
        Ok(PoissonTraffic {
            hosts,
            host_bps,
            load,
            sizes,
        })
    }

    /// Flows per second over the whole cluster so that the offered bytes
    /// equal `load` times the total host capacity.
    pub fn arrivals_per_s(&self) -> f64 {
        self.load * self.hosts as f64 * self.host_bps / (8.0 * self.sizes.mean_bytes())
    }

    /// All flows starting in [0, duration_s), in start order.
    pub fn generate(&self, duration_s: f64, rng: &mut Rng) -> Vec<BackgroundFlow> {
        let mean_gap = 1.0 / self.arrivals_per_s();
        let mut flows = Vec::with_capacity((duration_s / mean_gap * 1.1) as usize + 16);
        let mut t = rng.exponential(mean_gap);
        while t < duration_s {
            let src = rng.below(self.hosts as u64) as u32;
            // Uniform over the other hosts: draw from hosts-1, skip src.
            let mut dst = rng.below(self.hosts as u64 - 1) as u32;
            if dst >= src {
                dst += 1;
            }
            flows.push(BackgroundFlow {
                start_s: t,
                src,
                dst,
                bytes: self.sizes.sample(rng),
            });
            t += rng.exponential(mean_gap);
        }
        flows
    }
}
