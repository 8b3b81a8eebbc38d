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

    /// Charges `cost` at `now` until the bucket refuses: how many passed, and the refusal.
    fn drain(b: &Bucket, now: u64, cost: u32) -> (u64, u64, u64) {
        let (mut tat, mut passed) = (0, 0);
        loop {
            match charge(tat, now, b.increment(cost), b.tolerance()) {
                Charge::Allowed { tat: t } => (tat, passed) = (t, passed + 1),
                Charge::Denied { tat, wait } => return (passed, tat, wait),
            }
        }
    }

    #[test]
    fn a_full_bucket_of_five_admits_five_at_any_rate() {
        // At 1.5, 6 and 60 per second, 1e6 / rate rounds up: five separately rounded steps
        // overshot a separately rounded tolerance by 2 µs and the fifth was refused.
        for rate in [1.0, 1.5, 6.0, 7.0, 60.0, 100.0] {
            let b = Bucket::new(rate, 5.0, 0.0);
            let (passed, _, wait) = drain(&b, 10 * MINUTE, 1);
            assert_eq!(passed, 5, "at {rate}/s");
            // The sixth waits one credit at the configured rate, rounded up to a µs.
            assert_eq!(
                b.retry_after(wait),
                (1e6 / rate).ceil() as u64,
                "at {rate}/s"
            );
        }
    }

    proptest! {
        #[test]
        fn a_full_bucket_admits_exactly_its_burst_over_the_cost_and_the_retry_is_exact(
            exponent in -3.0f64..6.0,
            burst in 1u32..=1_000_000,
            cost_share in 0.0f64..1.0,
            cost_is_one in any::<bool>(),
        ) {
            let rate = 10f64.powf(exponent);
            // What the config accepts: an empty bucket refills within a year.
            prop_assume!(f64::from(burst) / rate <= 365.0 * 86_400.0);
            let cost = if cost_is_one { 1 } else { 1 + (cost_share * f64::from(burst - 1)) as u32 };
            let b = Bucket::new(rate, f64::from(burst), 0.0);
            let now = 400 * 86_400 * 1_000_000; // a full bucket: its TAT (0) is in the past
            let (passed, tat, wait) = drain(&b, now, cost);
            prop_assert_eq!(passed, u64::from(burst / cost));
            let deficit = (passed + 1) * u64::from(cost) - u64::from(burst);
            let retry = b.retry_after(wait);
            let exact = deficit as f64 * 1e6 / rate;
            prop_assert!((retry as f64 - exact).abs() <= 1.0, "retry {} µs, exact {} µs", retry, exact);
            let later = charge(tat, now + retry, b.increment(cost), b.tolerance());
            prop_assert!(matches!(later, Charge::Allowed { .. }), "{:?} after {} µs", later, retry);
        }

        #[test]
        fn remaining_counts_whole_credits_after_whole_charges(
            exponent in -3.0f64..6.0,
            burst in 1u32..=10_000,
            taken in 0u32..=10_000,
        ) {
            let rate = 10f64.powf(exponent);
            prop_assume!(f64::from(burst) / rate <= 365.0 * 86_400.0);
            let taken = taken.min(burst);
            let b = Bucket::new(rate, f64::from(burst), 0.0);
            let now = 400 * 86_400 * 1_000_000;
            let Charge::Allowed { tat } = charge(0, now, b.increment(taken), b.tolerance()) else {
                panic!("a full bucket refused {taken} of {burst}");
            };
            prop_assert_eq!(b.remaining(tat, now), u64::from(burst - taken));
        }
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
