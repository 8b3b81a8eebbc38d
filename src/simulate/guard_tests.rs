//! The fast guard's model: admission by tier and share, the waiting room, holds, the
//! critical ceiling and the limit's learning.

use super::*;
use crate::config::{HumanDuration, Mode};

fn config() -> AdaptiveConcurrencyConfig {
    AdaptiveConcurrencyConfig {
        mode: Mode::Enforce,
        initial_limit: 10,
        min_limit: 2,
        queue: 4,
        ..AdaptiveConcurrencyConfig::default()
    }
}

#[test]
fn each_tier_uses_its_share_of_the_limit_counting_the_tiers_above() {
    let mut g = FastGuard::new(&config(), true);
    // Limit 10: post may fill 10, get 9, test 8. 7 in flight (critical 2, post 5).
    let a = g.admit(0.0, [0.0, 0.0, 5.0, 0.0], [2.0, 5.0, 0.0, 0.0]);
    assert_eq!(a.admitted[0].0, [0.0, 0.0, 2.0, 0.0]);
    // The other 3 GETs wait (the room holds 4).
    assert!((g.waiting() - 3.0).abs() < 1e-9);
    assert_eq!(a.refused, [0.0; 4]);
    // A POST that has to wait (10 in flight) goes ahead of the GETs waiting, in the room's
    // last place; a test request then finds the room full, with no lower tier to take a
    // place from, and is refused.
    let a = g.admit(0.01, [0.0, 1.0, 0.0, 1.0], [2.0, 8.0, 2.0, 0.0]);
    assert_eq!(a.refused, [0.0, 0.0, 0.0, 1.0], "{a:?}");
    assert!((g.waiting() - 4.0).abs() < 1e-9);
    // A second POST takes the place of the newest GET, which is refused.
    let a = g.admit(0.02, [0.0, 1.0, 0.0, 0.0], [2.0, 8.0, 2.0, 0.0]);
    assert!((a.refused[2] - 1.0).abs() < 1e-9, "{a:?}");
    assert!((g.waiting() - 4.0).abs() < 1e-9);
    // A worker frees: the POST waiting is let in, with how long it waited.
    let a = g.admit(0.03, [0.0; 4], [2.0, 7.0, 2.0, 0.0]);
    let (amounts, waited) = a.admitted[0];
    assert_eq!(amounts, [0.0, 1.0, 0.0, 0.0]);
    assert!((waited - 0.02).abs() < 1e-9, "{waited}");
}

#[test]
fn waits_run_out_and_are_refused() {
    let mut g = FastGuard::new(&config(), true);
    g.admit(0.0, [0.0, 0.0, 2.0, 0.0], [0.0, 10.0, 0.0, 0.0]);
    assert!((g.waiting() - 2.0).abs() < 1e-9);
    let a = g.admit(0.2, [0.0; 4], [0.0, 10.0, 0.0, 0.0]);
    assert_eq!(a.refused, [0.0; 4], "max_wait is 250 ms");
    let a = g.admit(0.25, [0.0; 4], [0.0, 10.0, 0.0, 0.0]);
    assert!((a.refused[2] - 2.0).abs() < 1e-9, "{a:?}");
    assert_eq!(g.waiting(), 0.0);
}

#[test]
fn critical_requests_pass_until_the_ceiling_then_the_share_falls() {
    let mut c = config();
    c.critical_ceiling = 2.0;
    let mut g = FastGuard::new(&c, true);
    // Limit 10, ceiling 20: 15 in flight leaves room for 5 of 8 critical.
    let a = g.admit(0.0, [8.0, 0.0, 0.0, 0.0], [15.0, 0.0, 0.0, 0.0]);
    assert!((a.admitted[0].0[0] - 5.0).abs() < 1e-9);
    assert!((a.refused[0] - 3.0).abs() < 1e-9);
    g.end_of_tick(0.25, 0.0);
    assert!((g.critical_share() - 0.9).abs() < 1e-9);
    // Outside the share: a tenth is refused before the ceiling is looked at.
    let a = g.admit(0.26, [10.0, 0.0, 0.0, 0.0], [0.0; 4]);
    assert!((a.refused[0] - 1.0).abs() < 1e-9, "{a:?}");
    // And a refused critical request holds every other tier off while the app is busy
    // (half of each tier's share in flight), though the limit has room...
    let a = g.admit(0.27, [0.0, 1.0, 1.0, 1.0], [0.0, 5.0, 0.0, 0.0]);
    assert_eq!(a.refused, [0.0, 1.0, 1.0, 1.0]);
    // ... not once it is not: the burst that refused it is over.
    let a = g.admit(0.28, [0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]);
    assert_eq!(a.refused, [0.0; 4]);
}

#[test]
fn the_limit_learns_from_the_latencies_of_the_window() {
    let mut c = config();
    c.tier_hold = HumanDuration::from_secs(0);
    let mut g = FastGuard::new(&c, true);
    // Binding windows, full to their end, whose requests took twice the floor (50 ms,
    // then 100 ms): once the queue has stood SUSTAINED windows, the limit falls by the
    // gradient (clamped at 0.5).
    let get = crate::route_class::RouteClass::from_route(0, Tier::Get).index();
    g.started(get, 10.0, 0.05);
    g.admit(0.0, [0.0, 5.0, 0.0, 0.0], [0.0; 4]);
    g.end_of_tick(0.25, 0.0);
    let floor = g.tier_floors()[Tier::Get.index()];
    assert!((floor.unwrap() - 0.05).abs() < 1e-9);
    let before = g.limit();
    let mut at = 0.25;
    for i in 1..=crate::math::adaptive::SUSTAINED {
        g.started(get, 10.0, 0.1);
        g.admit(at + 0.05, [0.0, 20.0, 0.0, 0.0], [0.0, 10.0, 0.0, 0.0]);
        at += 0.25;
        g.end_of_tick(at, before);
        if i < crate::math::adaptive::SUSTAINED {
            assert_eq!(g.limit(), before, "not cut in window {i}");
        }
    }
    assert!(g.limit() <= 0.625 * before + 1e-9, "{} {before}", g.limit());
}

#[test]
fn unenforced_it_lets_everything_in() {
    let mut g = FastGuard::new(&config(), false);
    let a = g.admit(0.0, [1.0, 2.0, 30.0, 4.0], [50.0; 4]);
    assert_eq!(a.admitted, vec![([1.0, 2.0, 30.0, 4.0], 0.0)]);
    assert_eq!(a.refused, [0.0; 4]);
}
