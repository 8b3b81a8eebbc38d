//! A small seedable random number generator (SplitMix64) for shedding draws.
//!
//! Each middleware instance (one per actix worker) owns one, so a draw is a few arithmetic
//! instructions with no lock and no shared cache line. Seeds are injected, which makes every
//! shedding decision reproducible in tests.

/// SplitMix64: tiny, fast, statistically good enough for drop decisions (not for secrets).
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// A uniform draw in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        unit(self.next_u64())
    }

    /// A standard normal draw ([`normal`] of the next two uniform draws).
    pub fn next_normal(&mut self) -> f64 {
        let u = self.next_f64();
        normal(u, self.next_f64())
    }
}

/// A standard normal draw from two uniform draws in `[0, 1)` (Box–Muller), for modelled
/// service times (log-normal: `exp(σ × normal)`).
pub fn normal(u: f64, v: f64) -> f64 {
    (-2.0 * u.max(1e-12).ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

/// The SplitMix64 finaliser: a good 64-bit bit mixer.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Maps 64 random bits to a uniform value in `[0, 1)` (53 bits of precision).
pub fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// 64 bits from the operating system's random source, for default seeds.
pub fn os_seed() -> u64 {
    let mut buf = [0u8; 8];
    // If the OS source fails we still want a working (if predictable) generator.
    if getrandom::fill(&mut buf).is_err() {
        return 0x2545_F491_4F6C_DD1D;
    }
    u64::from_le_bytes(buf)
}

#[cfg(test)]
#[path = "rng_tests.rs"]
mod tests;
