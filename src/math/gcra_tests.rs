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

/// The state of a client who took `taken` credits at one instant from a full `b`.
fn after_taking(b: &Bucket, now: u64, taken: u32) -> u64 {
    match charge(0, now, b.increment(taken), b.tolerance()) {
        Charge::Allowed { tat } => tat,
        Charge::Denied { .. } => unreachable!("a full bucket holds its burst"),
    }
}

#[test]
fn a_raise_keeps_what_the_client_owes_in_credits() {
    // The case: 50 of 150 credits spent at 0.5 a second, then the rate raised to
    // 1000: the client owes 50 credits (50 ms at the new rate), not 100 s of them.
    let now = 10 * MINUTE;
    let old = Bucket::new(0.5, 150.0, 0.0);
    let tat = after_taking(&old, now, 50);
    let new = Bucket::new(1000.0, 150.0, 0.0);
    let carried = new.carry(tat, now, old.step());
    assert_eq!(carried - now, 50 * new.step());
    assert_eq!(new.remaining(carried, now), 100);
    // per_ip at 0.01 a second, one request, then back at 100: 499 left, not 93 s of refusal.
    let slow = Bucket::new(0.01, 500.0, 0.0);
    let tat = after_taking(&slow, now, 1);
    let fast = Bucket::new(100.0, 500.0, 0.0);
    assert_eq!(fast.remaining(fast.carry(tat, now, slow.step()), now), 499);
    // A full bucket stays full; a lowered burst caps what is owed at a full bucket's worth.
    assert_eq!(fast.carry(now - 5, now, slow.step()), now - 5);
    let small = Bucket::new(0.5, 10.0, 0.0);
    let owes_all = small.carry(after_taking(&old, now, 150), now, old.step());
    assert_eq!(owes_all - now, small.tolerance());
}

proptest! {
    #[test]
    fn a_change_that_only_raises_admits_what_the_old_settings_admitted_and_any_change_waits_at_most_a_full_refill(
        old_exp in -2.0f64..4.0,
        new_exp in -2.0f64..4.0,
        old_burst in 1u32..=10_000,
        new_burst in 1u32..=10_000,
        taken_share in 0.0f64..=1.0,
        cost_share in 0.0f64..=1.0,
        later in 0u64..5_000_000,
    ) {
        let (old_rate, new_rate) = (10f64.powf(old_exp), 10f64.powf(new_exp));
        prop_assume!(f64::from(old_burst) / old_rate <= 365.0 * 86_400.0);
        prop_assume!(f64::from(new_burst) / new_rate <= 365.0 * 86_400.0);
        let old = Bucket::new(old_rate, f64::from(old_burst), 0.0);
        let new = Bucket::new(new_rate, f64::from(new_burst), 0.0);
        let start = 400 * 86_400 * 1_000_000;
        let tat = after_taking(&old, start, (taken_share * f64::from(old_burst)) as u32);
        // The change, some time after the state was written.
        let now = start + later;
        let carried = new.carry(tat, now, old.step());
        let cost = 1 + (cost_share * f64::from(old_burst.min(new_burst) - 1)) as u32;
        let before = charge(tat, now, old.increment(cost), old.tolerance());
        let after = charge(carried, now, new.increment(cost), new.tolerance());
        if new_rate >= old_rate && new_burst >= old_burst && matches!(before, Charge::Allowed { .. }) {
            let admitted = matches!(after, Charge::Allowed { .. });
            prop_assert!(admitted, "{:?} then {:?}", before, after);
        }
        // Whatever the change: the next request of a cost the new bucket holds waits at most
        // its full refill.
        if let Charge::Denied { wait, .. } = after {
            prop_assert!(wait <= new.tolerance(), "{} µs > {} µs", wait, new.tolerance());
            let retry = new.retry_after(wait);
            let then = charge(carried, now + retry, new.increment(cost), new.tolerance());
            prop_assert!(matches!(then, Charge::Allowed { .. }), "{:?} after {} µs", then, retry);
        }
    }
}
