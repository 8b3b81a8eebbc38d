//! Token-bucket arithmetic in the GCRA form: one number per key, the "theoretical arrival
//! time" (TAT). A bucket of `burst` credits regenerating `rate` per second is full when
//! `tat <= now`; a request of cost `c` moves the TAT by `c / rate` and passes if the TAT stays
//! within `burst / rate` of now. Balances are computed lazily from (tat, now): no timers, no
//! per-tick work, and a full bucket is the same as no state at all. Times are microseconds.

/// The result of charging a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// The request fits; the bucket's new TAT.
    Allowed {
        /// New TAT.
        tat: u64,
    },
    /// It does not; `wait` µs from now it would.
    Denied {
        /// The TAT, unchanged.
        tat: u64,
        /// Time until enough credits exist.
        wait: u64,
    },
}

/// A bucket's parameters in µs.
///
/// The state moves in whole steps: one credit is `step` µs of TAT, `1e6 / rate` rounded
/// *down* to a whole µs, and both a request's increment and the tolerance are whole multiples
/// of it (`cost × step`, `burst × step`). Rounding the two separately would let the rounding
/// of each step add up: five steps of 666,667 µs overshoot a tolerance of 3,333,333 µs, so
/// `burst: 5` at 1.5/s would admit 4 at once. With one rounded step the count is exact:
/// `floor(burst / cost)` requests of one cost pass at one instant, for every rate and burst.
///
/// Rounding the step down makes the bucket regenerate at most one µs per credit faster
/// than configured (under 0.1% at 1,000 credits per second or less; a per-key rate near the
/// µs clock's limit of 1,000,000 per second is coarse), never slower, so a client told to
/// wait [`retry_after`](Self::retry_after) (computed from the exact rate) always passes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// µs of TAT per credit: `1e6 / rate` rounded down, at least 1.
    step: u64,
    /// µs the configured rate takes per credit (`1e6 / rate`, unrounded): what a wait is told in.
    per_credit: f64,
    /// Credits the bucket holds when full.
    pub burst: f64,
    /// Extra share of `burst` that may be used before the key is limited (soft throttling).
    pub overage: f64,
    tolerance: u64,
}

impl Bucket {
    /// A bucket of `burst` credits regenerating `rate` per second.
    pub fn new(rate: f64, burst: f64, overage: f64) -> Self {
        let per_credit = 1e6 / rate;
        // Rounded down, but not below a whole µs that the division missed by its last bits
        // (1e6 / (1e6 / 3) reads 2.9999999999999996).
        let step = ((per_credit * (1.0 + 4.0 * f64::EPSILON)) as u64).max(1);
        Self {
            step,
            per_credit,
            burst,
            overage,
            tolerance: round(burst * (1.0 + overage) * step as f64),
        }
    }

    /// How far a request of `cost` credits moves the TAT.
    pub fn increment(&self, cost: u32) -> u64 {
        u64::from(cost) * self.step
    }

    /// How far ahead of now the TAT may run: the burst plus the overage, in µs.
    pub fn tolerance(&self) -> u64 {
        self.tolerance
    }

    /// How long a refused request waits at the configured rate, in µs (rounded up), when
    /// the state says it is `wait` µs of TAT short ([`Charge::Denied`]).
    pub fn retry_after(&self, wait: u64) -> u64 {
        let exact = wait as f64 / self.step as f64 * self.per_credit;
        // Never shorter than the state's own wait: after it the request passes.
        ceil(exact).max(wait)
    }

    /// Credits available at `now`, overage included, never negative.
    pub fn balance(&self, tat: u64, now: u64) -> f64 {
        let debt = tat.saturating_sub(now) as f64;
        // Clamped: the tolerance is rounded to whole µs.
        ((self.tolerance() as f64 - debt) / self.step as f64)
            .clamp(0.0, self.burst * (1.0 + self.overage))
    }

    /// Credits of the nominal burst left at `now` (what `RateLimit: r=` advertises).
    pub fn remaining(&self, tat: u64, now: u64) -> u64 {
        let debt = tat.saturating_sub(now) as f64 / self.step as f64;
        // Truncation is floor for the non-negative values here (and needs no libm call).
        (self.burst - debt).max(0.0) as u64
    }
}

/// Rounds a non-negative value to the nearest integer without a libm call (the baseline
/// x86-64 target has no rounding instruction).
fn round(x: f64) -> u64 {
    (x + 0.5) as u64
}

/// Rounds a non-negative value up to an integer, saturating (no libm call either).
fn ceil(x: f64) -> u64 {
    let t = x as u64;
    if (t as f64) < x {
        t.saturating_add(1)
    } else {
        t
    }
}

/// Charges `increment` µs against `tolerance` µs.
pub fn charge(tat: u64, now: u64, increment: u64, tolerance: u64) -> Charge {
    let next = tat.max(now).saturating_add(increment);
    let ahead = next - now;
    if ahead <= tolerance {
        Charge::Allowed { tat: next }
    } else {
        Charge::Denied {
            tat,
            wait: ahead - tolerance,
        }
    }
}

/// Gives back a charge of `increment` µs.
pub fn refund(tat: u64, increment: u64) -> u64 {
    tat.saturating_sub(increment)
}

#[cfg(test)]
#[path = "gcra_tests.rs"]
mod tests;
