use super::*;
use proptest::prelude::*;

const SEC: u64 = 1_000_000;

fn rule(algorithm: QuotaAlgorithm, limit: u32, window_secs: u64) -> WindowRule {
    WindowRule {
        algorithm,
        limit,
        window: window_secs * SEC,
    }
}

/// Sends requests at the given times; returns which were admitted.
fn run(r: &WindowRule, times: &[u64]) -> Vec<bool> {
    let mut v = 0;
    times
        .iter()
        .map(|&t| {
            let (next, check) = r.hit(v, t, true);
            if let Some(n) = next {
                v = n;
            }
            check.allowed
        })
        .collect()
}

#[test]
fn fixed_window_allows_a_boundary_burst_sliding_does_not() {
    // 3 per minute: three at 59.9 s, three more at 60.1 s.
    let times = [
        59_900_000, 59_950_000, 59_990_000, 60_100_000, 60_150_000, 60_200_000,
    ];
    let fixed = run(&rule(QuotaAlgorithm::FixedWindow, 3, 60), &times);
    assert_eq!(fixed, [true; 6], "fixed windows let 6 through in 0.3 s");
    let sliding = run(&rule(QuotaAlgorithm::SlidingWindow, 3, 60), &times);
    assert_eq!(sliding, [true, true, true, false, false, false]);
}

#[test]
fn sliding_window_weights_the_previous_window() {
    let r = rule(QuotaAlgorithm::SlidingWindow, 10, 60);
    let mut v = 0;
    for i in 0..8 {
        v = r.hit(v, i * SEC, true).0.unwrap();
    }
    // 15 s into the next window, 75% of the previous 8 still count: 6, so 4 more fit.
    let at = 75 * SEC;
    let mut admitted = 0;
    loop {
        let (next, check) = r.hit(v, at, true);
        if !check.allowed {
            break;
        }
        admitted += 1;
        v = next.unwrap();
    }
    assert_eq!(admitted, 4);
}

#[test]
fn retry_after_points_at_the_first_moment_that_fits() {
    for algorithm in [QuotaAlgorithm::FixedWindow, QuotaAlgorithm::SlidingWindow] {
        let r = rule(algorithm, 3, 60);
        let mut v = 0;
        for t in [10, 20, 30] {
            v = r.hit(v, t * SEC, true).0.unwrap();
        }
        let (_, denied) = r.hit(v, 40 * SEC, true);
        assert!(!denied.allowed);
        let at = 40 * SEC + denied.retry;
        assert!(
            r.hit(v, at, false).1.allowed,
            "{algorithm:?}: fits at +{}",
            denied.retry
        );
        assert!(
            !r.hit(v, at - 2, false).1.allowed,
            "{algorithm:?}: not earlier"
        );
    }
}

#[test]
fn refund_and_idle() {
    let r = rule(QuotaAlgorithm::SlidingWindow, 3, 60);
    let v = r.hit(0, 5 * SEC, true).0.unwrap();
    assert!(!r.idle(v, 6 * SEC));
    assert!(!r.idle(v, 65 * SEC), "still weighted in the next window");
    assert!(r.idle(v, 125 * SEC));
    let back = r.refund(v, 6 * SEC).unwrap();
    assert!(r.idle(back, 6 * SEC));
    assert_eq!(r.refund(v, 70 * SEC), None, "another window");
    let f = rule(QuotaAlgorithm::FixedWindow, 3, 60);
    assert!(f.idle(v, 65 * SEC));
}

#[test]
fn check_without_add_counts_nothing() {
    let r = rule(QuotaAlgorithm::FixedWindow, 1, 60);
    let (next, check) = r.hit(0, SEC, false);
    assert!(check.allowed && next.is_none());
}

proptest! {
    #[test]
    fn no_aligned_window_admits_more_than_the_limit(
        sliding in any::<bool>(),
        limit in 1u32..20,
        gaps in proptest::collection::vec(0u64..20 * SEC, 1..300),
    ) {
        let algorithm = if sliding { QuotaAlgorithm::SlidingWindow } else { QuotaAlgorithm::FixedWindow };
        let r = rule(algorithm, limit, 60);
        let mut now = 0;
        let times: Vec<u64> = gaps.iter().map(|g| { now += g; now }).collect();
        let admitted = run(&r, &times);
        let mut per_window = std::collections::BTreeMap::new();
        for (t, ok) in times.iter().zip(&admitted) {
            if *ok { *per_window.entry(t / r.window).or_insert(0u32) += 1; }
        }
        for count in per_window.values() { prop_assert!(*count <= limit); }
        if sliding {
            // The weighted estimate never exceeds the limit at any admission.
            let mut v = 0;
            for &t in &times {
                let (next, check) = r.hit(v, t, true);
                if let Some(n) = next { v = n; }
                if check.allowed {
                    let c = roll(v, t / r.window);
                    prop_assert!(r.estimate(c, t % r.window) <= f64::from(limit) + 1e-9);
                }
            }
        }
    }
}

/// The state of a client that sent `earlier` requests one window before `at` and `spent` at
/// `at`, under `r` (only those that fit are counted).
fn spent_state(r: &WindowRule, at: u64, earlier: u32, spent: u32) -> u64 {
    let mut v = 0;
    for (t, n) in [(at - r.window, earlier), (at, spent)] {
        for _ in 0..n {
            if let (Some(next), _) = r.hit(v, t, true) {
                v = next;
            }
        }
    }
    v
}

#[test]
fn a_lowered_limit_caps_the_counts_at_it() {
    // 50 of 100 counted in this window, then the limit cut to 10: the client waits the
    // window out as a client that spent 10 would, not the 40 more it is over.
    let old = rule(QuotaAlgorithm::SlidingWindow, 100, 60);
    let at = 1_000 * 60 * SEC;
    let v = spent_state(&old, at, 0, 50);
    let new = rule(QuotaAlgorithm::SlidingWindow, 10, 60);
    let (_, check) = new.hit(v, at, true);
    assert!(!check.allowed);
    let full = spent_state(&new, at, 0, 10);
    assert_eq!(check.retry, new.hit(full, at, true).1.retry);
    // A raised limit admits at once.
    let raised = rule(QuotaAlgorithm::SlidingWindow, 200, 60);
    assert!(raised.hit(v, at, true).1.allowed);
}

proptest! {
    #[test]
    fn a_quota_change_that_only_raises_admits_what_the_old_one_did_and_any_change_waits_at_most_a_full_quota(
        sliding in any::<bool>(),
        old_limit in 1u32..=200,
        new_limit in 1u32..=200,
        old_window in 1u64..=3_600,
        new_window in 1u64..=3_600,
        earlier_share in 0.0f64..=1.5,
        spent_share in 0.0f64..=1.5,
        offset in 0.0f64..1.0,
        later in 0.0f64..1.0,
    ) {
        let algorithm = if sliding { QuotaAlgorithm::SlidingWindow } else { QuotaAlgorithm::FixedWindow };
        let old = rule(algorithm, old_limit, old_window);
        let new = rule(algorithm, new_limit, new_window);
        // Some way into a window, far from the epoch; the change a little later.
        let at = 500_000 * old.window + (offset * old.window as f64) as u64;
        let share = |s: f64| (s * f64::from(old_limit)) as u32;
        let v = spent_state(&old, at, share(earlier_share), share(spent_share));
        let now = at + (later * old.window as f64) as u64;
        let before = old.hit(v, now, false).1;
        let after = new.hit(v, now, true).1;
        if new_limit >= old_limit && new_window <= old_window && before.allowed {
            prop_assert!(after.allowed, "{:?} then {:?}", before, after);
        }
        // Whatever the change: no longer than a client that spent the whole new quota at
        // this instant waits, and then it passes.
        if !after.allowed {
            let full = spent_state(&new, now, new_limit, new_limit);
            let most = new.hit(full, now, true).1.retry;
            prop_assert!(after.retry <= most, "{} µs > {} µs", after.retry, most);
            let then = new.hit(v, now + after.retry, true).1;
            prop_assert!(then.allowed, "{:?} after {} µs", then, after.retry);
        }
    }
}
