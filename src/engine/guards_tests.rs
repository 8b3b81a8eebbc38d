use super::super::Decider;
use crate::config::{LimitersConfig, Mode};
use crate::limiter::LimiterName;

/// The limiters with `on` enforced and every other off.
fn only(on: &[LimiterName]) -> LimitersConfig {
    let mut l = LimitersConfig::default();
    for limiter in LimiterName::ALL {
        let mode = if on.contains(&limiter) {
            Mode::Enforce
        } else {
            Mode::Off
        };
        limiter.set_mode(&mut l, mode);
    }
    l
}

#[test]
fn the_defaults_are_decided_by_the_guards_alone_and_a_per_key_limiter_by_the_chain() {
    // What `tests/middleware.rs` compares with the chain rests on this.
    assert_eq!(Decider::of(&LimitersConfig::default()), Decider::Guards);
    let guards = [
        LimiterName::WorkerUtilization,
        LimiterName::AdaptiveConcurrency,
    ];
    assert_eq!(Decider::of(&only(&guards)), Decider::Guards);
    assert_eq!(Decider::of(&only(&guards[..1])), Decider::Guards);
    assert_eq!(Decider::of(&only(&[])), Decider::Guards);
    for keyed in [
        LimiterName::RequestRate,
        LimiterName::ConcurrentRequests,
        LimiterName::FleetUsage,
    ] {
        let mut on = guards.to_vec();
        on.push(keyed);
        assert_eq!(Decider::of(&only(&on)), Decider::Chain, "{keyed:?}");
        let mut dark = only(&guards);
        keyed.set_mode(&mut dark, Mode::Dark);
        assert_eq!(Decider::of(&dark), Decider::Chain, "{keyed:?} dark");
    }
    let mut rate = only(&[LimiterName::RequestRate]);
    rate.request_rate.headers = false;
    assert_eq!(Decider::of(&rate), Decider::RateAlone);
}
