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
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// µs to regenerate one credit (`1e6 / rate`).
    pub per_credit: f64,
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
        Self {
            per_credit,
            burst,
            overage,
            tolerance: round(burst * (1.0 + overage) * per_credit),
        }
    }

    /// How far a request of `cost` credits moves the TAT.
    pub fn increment(&self, cost: u32) -> u64 {
        round(f64::from(cost) * self.per_credit)
    }

    /// How far ahead of now the TAT may run: the burst plus the overage, in µs.
    pub fn tolerance(&self) -> u64 {
        self.tolerance
    }

    /// Credits available at `now`, overage included, never negative.
    pub fn balance(&self, tat: u64, now: u64) -> f64 {
        let debt = tat.saturating_sub(now) as f64;
        // Clamped: the tolerance is rounded to whole µs.
        ((self.tolerance() as f64 - debt) / self.per_credit)
            .clamp(0.0, self.burst * (1.0 + self.overage))
    }

    /// Credits of the nominal burst left at `now` (what `RateLimit: r=` advertises).
    pub fn remaining(&self, tat: u64, now: u64) -> u64 {
        let debt = tat.saturating_sub(now) as f64 / self.per_credit;
        // Truncation is floor for the non-negative values here (and needs no libm call).
        (self.burst - debt).max(0.0) as u64
    }
}

/// Rounds a non-negative value to the nearest integer without a libm call (the baseline
/// x86-64 target has no rounding instruction).
fn round(x: f64) -> u64 {
    (x + 0.5) as u64
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MINUTE: u64 = 60_000_000;

    #[test]
    fn the_credit_pool_example() {
        // CRED_MAX 100, one credit per minute; three POSTs of 20 at 00:10, a GET of 2 at 00:20.
        let b = Bucket::new(1.0 / 60.0, 100.0, 0.0);
        let (tol, post, get) = (b.tolerance(), b.increment(20), b.increment(2));
        let mut tat = 0;
        assert_eq!(b.balance(tat, 0), 100.0);
        let at_10 = 10 * MINUTE;
        for _ in 0..3 {
            match charge(tat, at_10, post, tol) {
                Charge::Allowed { tat: t } => tat = t,
                denied => panic!("{denied:?}"),
            }
        }
        assert!((b.balance(tat, at_10) - 40.0).abs() < 1e-9);
        // Ten minutes later the app sees 50: the record said 40 at 00:10.
        let at_20 = 20 * MINUTE;
        assert!((b.balance(tat, at_20) - 50.0).abs() < 1e-9);
        match charge(tat, at_20, get, tol) {
            Charge::Allowed { tat: t } => tat = t,
            denied => panic!("{denied:?}"),
        }
        assert!((b.balance(tat, at_20) - 48.0).abs() < 1e-9);
        assert_eq!(b.remaining(tat, at_20), 48);
    }

    #[test]
    fn denial_says_exactly_when_enough_credits_exist() {
        let b = Bucket::new(10.0, 5.0, 0.0); // 100 ms a credit
        let (tol, one) = (b.tolerance(), b.increment(1));
        let mut tat = 0;
        for _ in 0..5 {
            let Charge::Allowed { tat: t } = charge(tat, 0, one, tol) else {
                panic!()
            };
            tat = t;
        }
        assert_eq!(
            charge(tat, 0, one, tol),
            Charge::Denied { tat, wait: 100_000 }
        );
        assert_eq!(
            charge(tat, 0, b.increment(3), tol),
            Charge::Denied { tat, wait: 300_000 }
        );
        assert!(matches!(
            charge(tat, 100_000, one, tol),
            Charge::Allowed { .. }
        ));
    }

    #[test]
    fn soft_overage_allows_ten_percent_more() {
        let b = Bucket::new(1.0, 100.0, 0.1);
        let (tol, one) = (b.tolerance(), b.increment(1));
        let (mut tat, mut passed) = (0, 0);
        while let Charge::Allowed { tat: t } = charge(tat, 0, one, tol) {
            tat = t;
            passed += 1;
        }
        assert_eq!(passed, 110);
        assert_eq!(b.remaining(tat, 0), 0);
    }

    #[test]
    fn refund_restores_the_balance() {
        let b = Bucket::new(1.0, 10.0, 0.0);
        let Charge::Allowed { tat } = charge(0, 5_000_000, b.increment(4), b.tolerance()) else {
            panic!()
        };
        assert!((b.balance(tat, 5_000_000) - 6.0).abs() < 1e-9);
        let back = refund(tat, b.increment(4));
        assert!((b.balance(back, 5_000_000) - 10.0).abs() < 1e-9);
    }

    proptest! {
        #[test]
        fn balance_stays_within_zero_and_burst_plus_overage(
            rate in 0.01f64..10_000.0,
            burst in 1u32..10_000,
            overage in 0.0f64..1.0,
            steps in proptest::collection::vec((0u64..5_000_000, 0u32..50), 1..200),
        ) {
            let b = Bucket::new(rate, f64::from(burst), overage);
            let tol = b.tolerance();
            let (mut tat, mut now) = (0u64, 0u64);
            for (dt, cost) in steps {
                now += dt;
                if let Charge::Allowed { tat: t } = charge(tat, now, b.increment(cost.min(burst)), tol) {
                    tat = t;
                }
                let bal = b.balance(tat, now);
                prop_assert!(bal >= 0.0);
                prop_assert!(bal <= f64::from(burst) * (1.0 + overage) + 1e-6);
                prop_assert!(tat.saturating_sub(now) <= tol);
            }
        }
    }
}
