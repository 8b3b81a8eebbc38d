//! Tests of `store/redis/breaker.rs`.

use super::*;

const MS: u64 = 1_000;

/// 5 failures in 1 s; 500 ms backoff, doubling up to 10 s.
fn params() -> BreakerParams {
    BreakerParams {
        failures: 5,
        window: 1_000 * MS,
        backoff: 500 * MS,
        max_backoff: 10_000 * MS,
    }
}

#[test]
fn opens_after_five_failures_in_a_second_and_probes_back() {
    let b = Breaker::new(params());
    for i in 0..4 {
        assert!(!b.failure(i * 100 * MS));
        assert!(b.allow(i * 100 * MS));
    }
    assert!(b.failure(400 * MS), "the fifth failure within 1 s opens it");
    assert_eq!(b.state(401 * MS), BreakerState::Open);
    assert!(!b.allow(899 * MS), "no calls during the 500 ms backoff");
    assert!(b.allow(900 * MS), "one probe when it ends");
    assert!(!b.allow(900 * MS), "and only one");
    assert_eq!(b.state(901 * MS), BreakerState::HalfOpen);
    assert!(b.failure(950 * MS), "a failed probe opens it again");
    assert!(!b.allow(1_900 * MS), "for twice as long");
    assert!(b.allow(1_950 * MS));
    b.success();
    assert_eq!(b.state(1_951 * MS), BreakerState::Closed);
    assert!(b.allow(1_951 * MS));
    // Closed again with the first backoff: five more failures open it for 500 ms.
    for i in 0..5 {
        b.failure(2_000 * MS + i);
    }
    assert!(!b.allow(2_499 * MS));
    assert!(b.allow(2_500 * MS + 4));
}

#[test]
fn failures_spread_over_more_than_the_window_do_not_open_it() {
    let b = Breaker::new(params());
    for i in 0..20 {
        assert!(
            !b.failure(i * 300 * MS),
            "one failure every 300 ms: at most 4 a second"
        );
    }
    assert_eq!(b.state(6_000 * MS), BreakerState::Closed);
}

#[test]
fn the_default_backoff_brings_shared_limits_back_within_a_second() {
    let p = BreakerParams::default();
    assert_eq!((p.failures, p.window), (5, 1_000 * MS));
    assert!(p.max_backoff <= 1_000 * MS);
}

#[test]
fn the_backoff_is_capped() {
    let b = Breaker::new(params());
    for i in 0..5 {
        b.failure(i);
    }
    let mut now = 0;
    for _ in 0..10 {
        now += 20_000 * MS;
        assert!(b.allow(now));
        b.failure(now);
    }
    assert!(!b.allow(now + 9_999 * MS));
    assert!(b.allow(now + 10_000 * MS), "never more than 10 s");
}
