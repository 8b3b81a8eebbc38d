use super::*;
use crate::limiter::LimiterName;

fn new_state(limit: f64) -> Arc<AdaptiveState> {
    Arc::new(AdaptiveState::new(limit))
}

fn admitted(c: &AdaptiveConcurrencyConfig, s: &Arc<AdaptiveState>, tier: Tier) -> bool {
    admitted_at(c, s, tier, 0)
}

fn admitted_at(c: &AdaptiveConcurrencyConfig, s: &Arc<AdaptiveState>, tier: Tier, ms: u64) -> bool {
    match acquire(c, s, (tier, 0), Duration::from_millis(ms), false).unwrap() {
        Check::Allowed(Place::Held(p)) => {
            p.keep();
            true
        }
        Check::Allowed(Place::Waiting(_)) => panic!("no queue"),
        Check::Rejected(r, ()) => {
            assert_eq!(r.status.as_u16(), 503);
            assert_eq!(r.limiter, LimiterName::AdaptiveConcurrency);
            false
        }
    }
}

#[test]
fn tiers_are_refused_in_order_and_critical_never_without_a_ceiling() {
    let c = AdaptiveConcurrencyConfig {
        tier_hold: crate::schema::HumanDuration::from_secs(0),
        critical_ceiling: 0.0,
        ..AdaptiveConcurrencyConfig::default() // get 0.9, test 0.8
    };
    let s = new_state(10.0);
    for _ in 0..8 {
        assert!(admitted(&c, &s, Tier::Post));
    }
    assert!(
        !admitted(&c, &s, Tier::Test),
        "test may use 8 of 10, the POSTs counted"
    );
    assert!(admitted(&c, &s, Tier::Get));
    assert!(!admitted(&c, &s, Tier::Get), "get may use 9");
    assert!(admitted(&c, &s, Tier::Post));
    assert!(
        admitted(&c, &s, Tier::Post),
        "the GET took none of POST's room"
    );
    assert!(!admitted(&c, &s, Tier::Post), "post may use all 10");
    for _ in 0..100 {
        assert!(admitted(&c, &s, Tier::Critical));
    }
    assert_eq!(s.in_flight(), 111, "critical requests are counted");
    assert!(s.take_window(1).binding());
    // ... and take room from every other tier.
    let s = new_state(10.0);
    for _ in 0..6 {
        assert!(admitted(&c, &s, Tier::Critical));
    }
    for _ in 0..4 {
        assert!(admitted(&c, &s, Tier::Post));
    }
    assert!(
        !admitted(&c, &s, Tier::Post),
        "6 critical and 4 posts fill 10"
    );
    assert!(!admitted(&c, &s, Tier::Get));
}

/// Whether a critical request of client `key` at `ms` is let in (kept in flight).
fn critical(c: &AdaptiveConcurrencyConfig, s: &Arc<AdaptiveState>, key: u64, ms: u64) -> bool {
    match acquire(
        c,
        s,
        (Tier::Critical, key),
        Duration::from_millis(ms),
        false,
    )
    .unwrap()
    {
        Check::Allowed(Place::Held(p)) => {
            p.keep();
            true
        }
        Check::Allowed(Place::Waiting(_)) => panic!("critical requests never wait"),
        Check::Rejected(r, ()) => {
            assert_eq!((r.status.as_u16(), r.tier), (503, Tier::Critical));
            false
        }
    }
}

#[test]
fn once_the_capacity_is_known_the_ceiling_is_at_most_its_cap() {
    let c = AdaptiveConcurrencyConfig {
        critical_ceiling: 4.0,
        ..AdaptiveConcurrencyConfig::default()
    };
    // A limit of 10 lets critical requests in up to 40 in flight; a cap of 15 stops them there.
    let s = new_state(10.0);
    s.publish_ceiling_cap(15.0);
    for key in 0..15 {
        assert!(critical(&c, &s, key, 0), "under the cap");
    }
    assert!(!critical(&c, &s, 15, 0), "the 16th finds the cap");
    assert_eq!(s.in_flight(), 15);
}

#[test]
fn critical_requests_past_the_ceiling_are_refused_and_then_by_cohort() {
    let c = AdaptiveConcurrencyConfig {
        critical_ceiling: 2.0,
        ..AdaptiveConcurrencyConfig::default() // rotation 5 min
    };
    let s = new_state(10.0);
    for key in 0..20 {
        assert!(critical(&c, &s, key, 0), "under twice the limit");
    }
    assert!(!critical(&c, &s, 20, 0), "the 21st finds the ceiling");
    assert_eq!(s.in_flight(), 20, "the refused one holds nothing");
    // The window overflowed: 90% of the cohorts are admitted, the same ones each time.
    assert!((s.settle_critical() - 0.9).abs() < 1e-12);
    let epoch = cohort_epoch(Duration::from_millis(1), c.cohort_rotation.get());
    let outside = (100..10_000)
        .find(|&k| cohort_score(k, epoch) >= 0.9)
        .unwrap();
    let inside = (100..10_000)
        .find(|&k| cohort_score(k, epoch) < 0.9)
        .unwrap();
    for _ in 0..20 {
        s.release(Tier::Critical, None, Duration::ZERO);
    }
    assert!(!critical(&c, &s, outside, 1), "outside the share: refused");
    assert!(!critical(&c, &s, outside, 2), "and again");
    assert!(critical(&c, &s, inside, 3), "inside it: let in");
    let share_of = |keys: std::ops::Range<u64>, s: &Arc<AdaptiveState>| {
        let n = keys.end - keys.start;
        let admitted = keys
            .filter(|&k| {
                let ok = critical(&c, s, k, 4);
                if ok {
                    s.release(Tier::Critical, None, Duration::ZERO);
                }
                ok
            })
            .count();
        admitted as f64 / n as f64
    };
    let let_in = share_of(1000..11_000, &s);
    assert!((let_in - 0.9).abs() < 0.02, "{let_in}");
    // A window at the limit without overflow gives back a little; clear ones, the rest.
    for _ in 0..10 {
        assert!(critical(&c, &s, inside, 5));
    }
    assert!((s.settle_critical() - 0.95).abs() < 1e-12, "at the limit");
    for _ in 0..11 {
        s.release(Tier::Critical, None, Duration::ZERO);
    }
    assert!((s.settle_critical() - 1.0).abs() < 1e-12, "a clear window");
    assert!(critical(&c, &s, outside, 6), "everyone again");
    // Other tiers' requests count towards the ceiling.
    let s = new_state(4.0);
    for _ in 0..4 {
        assert!(admitted(&c, &s, Tier::Post));
    }
    for key in 0..4 {
        assert!(critical(&c, &s, key, 0));
    }
    assert!(!critical(&c, &s, 5, 0), "4 POSTs and 4 critical fill 2 × 4");
}

#[test]
fn a_limit_that_shrinks_under_lower_tiers_still_has_room_for_posts() {
    let c = AdaptiveConcurrencyConfig::default(); // get 0.9, test 0.8, hold 1 s
    let s = new_state(10.0);
    for _ in 0..8 {
        assert!(admitted(&c, &s, Tier::Test));
    }
    assert!(admitted(&c, &s, Tier::Get));
    // The limit falls to 4 with nine lower-tier requests in flight: POSTs count their own.
    s.publish(4.0, [None; 4]);
    for _ in 0..4 {
        assert!(admitted(&c, &s, Tier::Post));
    }
    assert!(!admitted(&c, &s, Tier::Post));
    assert!(
        !admitted(&c, &s, Tier::Get),
        "3.6 for get, and 13 in flight"
    );
    assert_eq!(s.in_flight(), 13);
    for tier in [Tier::Test, Tier::Get, Tier::Post] {
        s.release(tier, None, Duration::ZERO);
    }
    assert_eq!(s.in_flight(), 10);
}

#[test]
fn a_dropped_permit_gives_its_slot_back_and_a_kept_one_reports_latency() {
    let c = AdaptiveConcurrencyConfig::default();
    let s = new_state(10.0);
    let Check::Allowed(Place::Held(p)) =
        acquire(&c, &s, (Tier::Get, 0), Duration::ZERO, false).unwrap()
    else {
        panic!("admitted");
    };
    assert_eq!(s.in_flight(), 1);
    drop(p);
    assert_eq!(s.in_flight(), 0);
    assert_eq!(
        s.take_window(1).total(),
        0,
        "no latency for a request that never ran"
    );
    for ms in [30, 10, 20] {
        let Check::Allowed(Place::Held(p)) =
            acquire(&c, &s, (Tier::Get, 0), Duration::ZERO, false).unwrap()
        else {
            panic!("admitted");
        };
        let at = p.keep();
        s.release(
            Tier::Get,
            Some(state::micros(Duration::from_millis(ms) - at)),
            Duration::ZERO,
        );
    }
    let w = s.take_window(2);
    let other = crate::route_class::RouteClass::other(Tier::Get).index();
    assert_eq!(
        (w.tier_counts(), w.count[other], w.sum[other], w.min, w.binding()),
        ([0, 0, 3, 0], 3, 60_000, 10_000, false),
        "counted under the request's tier, on no known route"
    );
    let next = s.take_window(3);
    assert_eq!((next.total(), next.min), (0, u64::MAX));
}

#[test]
fn a_refused_tier_holds_every_lower_tier_off_for_tier_hold() {
    let c = AdaptiveConcurrencyConfig::default(); // get 0.9, test 0.8, hold 1 s
    let s = new_state(10.0);
    let mut slots = Vec::new();
    for _ in 0..10 {
        let Check::Allowed(Place::Held(p)) =
            acquire(&c, &s, (Tier::Post, 0), Duration::ZERO, false).unwrap()
        else {
            panic!("admitted");
        };
        slots.push(p);
    }
    assert!(!admitted_at(&c, &s, Tier::Post, 100), "full");
    // Room again, but the refused POST holds get and test off until 1.1 s.
    drop(slots.drain(..5));
    assert!(!admitted_at(&c, &s, Tier::Get, 200));
    assert!(!admitted_at(&c, &s, Tier::Test, 1099));
    assert!(
        admitted_at(&c, &s, Tier::Post, 1099),
        "post itself is not held"
    );
    assert!(admitted_at(&c, &s, Tier::Get, 1100));
    assert!(
        !admitted_at(&c, &s, Tier::Test, 1100),
        "the GET held off at 200 ms holds test off until 1.2 s"
    );
    assert!(admitted_at(&c, &s, Tier::Test, 2100));
    assert_eq!(s.in_flight(), 8, "held-off requests took no slot");
    // A refused GET holds only test.
    drop(slots);
    let s = new_state(10.0);
    for _ in 0..9 {
        assert!(admitted_at(&c, &s, Tier::Post, 2000));
    }
    assert!(!admitted_at(&c, &s, Tier::Get, 2000), "get may use 9");
    assert!(admitted_at(&c, &s, Tier::Post, 2001));
    assert!(!admitted_at(&c, &s, Tier::Test, 2999));
    assert!(s.take_window(3).binding());
    // tier_hold 0 holds nothing.
    let c = AdaptiveConcurrencyConfig {
        tier_hold: crate::schema::HumanDuration::from_secs(0),
        ..c
    };
    let s = new_state(1.0);
    assert!(admitted_at(&c, &s, Tier::Post, 0));
    assert!(!admitted_at(&c, &s, Tier::Post, 0));
    s.release(Tier::Post, None, Duration::ZERO);
    assert!(admitted_at(&c, &s, Tier::Test, 0));
}

#[test]
fn a_share_rounded_by_a_cast_admits_exactly_what_floor_admits() {
    let shares = [
        f64::NAN,
        f64::NEG_INFINITY,
        -1.5,
        -0.0,
        0.0,
        0.3,
        0.999,
        1.0,
        1.5,
        3.7,
        2.9999999999999996,
        4.0,
        5.000000000000001,
        1e12,
        1e30,
        f64::INFINITY,
    ];
    for x in shares {
        for in_flight in [0u64, 1, 2, 3, 4, 5, 1_000_000, 1 << 40] {
            let f = in_flight as f64;
            assert_eq!(
                f < super::state::whole(x).max(1.0),
                f < x.floor().max(1.0),
                "share {x}, {in_flight} in flight"
            );
            assert_eq!(
                super::state::fits(in_flight, x),
                f < x.floor().max(1.0),
                "fits: share {x}, {in_flight} in flight"
            );
            assert_eq!(
                f >= super::state::whole(x).max(1.0),
                f >= x.floor().max(1.0),
                "ceiling {x}, {in_flight} in flight"
            );
        }
    }
}

impl crate::math::latency_window::Window {
    /// Requests that finished in it, per tier.
    pub fn tier_counts(&self) -> [u64; 4] {
        let mut n = [0; 4];
        for (c, &count) in self.count.iter().enumerate() {
            n[crate::route_class::tier_index(c)] += count;
        }
        n
    }
}

#[test]
fn the_lane_holds_the_lower_tiers_and_lets_critical_requests_past() {
    let c = AdaptiveConcurrencyConfig {
        tier_hold: crate::schema::HumanDuration::from_secs(0),
        ..AdaptiveConcurrencyConfig::default()
    };
    let s = new_state(20.0);
    // The controller sheds, and the capacity is 4: the lane is 5.
    s.publish_lane(5.0);
    assert_eq!(s.lower_limit(), 5.0);
    for _ in 0..5 {
        assert!(admitted(&c, &s, Tier::Post));
    }
    assert!(!admitted(&c, &s, Tier::Post), "the lane, not the limit of 20");
    assert!(!admitted(&c, &s, Tier::Get));
    for _ in 0..10 {
        assert!(admitted(&c, &s, Tier::Critical), "under the critical ceiling");
    }
    // The controller stops shedding: the limit again.
    s.publish_lane(f64::INFINITY);
    assert!(admitted(&c, &s, Tier::Post));
}
