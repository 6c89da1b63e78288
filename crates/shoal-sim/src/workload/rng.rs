//! A small deterministic random number generator (SplitMix64).
//!
//! Workloads must be reproducible for a seed and independent of any crate
//! version, so the generator is spelled out here rather than borrowed.

/// SplitMix64: 64 bits of state, passes BigCrush, one multiply-xorshift
/// chain per draw — plenty for traffic generation.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// An independent stream derived from this seed and a label, so that
    /// e.g. background traffic does not shift when a job is added.
    pub fn derive(seed: u64, label: u64) -> Self {
        let mut mixer = Rng::new(seed ^ label.wrapping_mul(0xA24B_AED4_963E_E407));
        Rng::new(mixer.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in [0, n); `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0)");
        // Lemire's multiply-shift: bias < n / 2^64, negligible here.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Exponentially distributed with the given mean (Poisson gaps).
    pub fn exponential(&mut self, mean: f64) -> f64 {
        // 1 - u lies in (0, 1], so the logarithm is finite.
        -mean * (1.0 - self.next_f64()).ln()
    }
}
