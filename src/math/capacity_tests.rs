//! The learned capacity's tests: saturation, its stretches, and what a probe leaves out.

use super::*;

const MS: u64 = 1000;

/// `seconds` of 250 ms windows in which `busy` requests were served at once.
fn run(c: &mut CapacityEstimate, from_ms: u64, seconds: u64, busy: f64, saturated: bool) -> u64 {
    let mut at = from_ms;
    for _ in 0..seconds * 4 {
        at += 250;
        c.observe(at * MS, busy * (250 * MS) as f64, saturated.into(), 1.0);
    }
    at
}

#[test]
fn unknown_until_seen_saturated_then_the_work_rate_of_saturation() {
    let mut c = CapacityEstimate::default();
    c.observe(0, 0.0, false.into(), 1.0);
    // Half busy for a minute: it serves at least 4 at once, nothing more is known.
    let at = run(&mut c, 0, 60, 4.0, false);
    assert_eq!(c.learned(), None);
    assert!((c.at_least() - 4.0).abs() < 1e-9);
    // Saturated: 8 workers' worth of work a second.
    run(&mut c, at, 4, 8.0, true);
    assert!((c.learned().unwrap() - 8.0).abs() < 1e-9);
}

#[test]
fn slow_without_refusals_is_saturation_only_when_the_queue_stood() {
    // Two workers at 0.75: requests take 2.3 times their service time, the limit refuses
    // nothing, and the queue drains now and then (1 in flight at some window's end).
    let mut c = CapacityEstimate::default();
    c.observe(0, 0.0, false.into(), 1.0);
    let slow = |in_flight| Evidence {
        latency: 2.3,
        expected: 1.0,
        binding: false,
        in_flight,
    };
    let mut at = 0;
    for i in 0..40 {
        at += 250;
        let in_flight = if i % 4 == 0 { 1 } else { 6 };
        c.observe(at * MS, 1.5 * (250 * MS) as f64, slow(in_flight), 1.0);
    }
    assert_eq!(c.learned(), None, "a busy app, not a saturated one");
    // The queue never drains below what the app serves at once: saturated.
    for _ in 0..8 {
        at += 250;
        c.observe(at * MS, 2.0 * (250 * MS) as f64, slow(6), 1.0);
    }
    assert!(
        (c.learned().unwrap() - 2.0).abs() < 1e-9,
        "{:?}",
        c.learned()
    );
}

#[test]
fn a_noisy_stretch_moves_it_little_a_bigger_app_at_once() {
    let mut c = CapacityEstimate::default();
    c.observe(0, 0.0, false.into(), 1.0);
    let at = run(&mut c, 0, 4, 8.0, true);
    // One saturated stretch that served 6: a tenth of the way.
    let at = run(&mut c, at, 2, 6.0, true);
    assert!((c.learned().unwrap() - 7.8).abs() < 1e-9);
    // The app serves 16 without saturating: it is bigger than thought.
    let mut at = at;
    for _ in 0..6 {
        at = run(&mut c, at, 2, 16.0, false);
    }
    assert!(c.learned().unwrap() > 15.5, "{:?}", c.learned());
    // Quiet stretches change nothing.
    let before = c.learned();
    run(&mut c, at, 20, 1.0, false);
    assert_eq!(c.learned(), before);
}

#[test]
fn a_service_time_that_moved_moves_the_capacity_with_it() {
    let mut c = CapacityEstimate::default();
    c.observe(0, 0.0, false.into(), 50_000.0);
    // 8 requests of 50 ms at once while saturated.
    let mut at = 0;
    for _ in 0..8 {
        at += 250;
        c.observe(at * MS, 8.0 * (250 * MS) as f64, true.into(), 50_000.0);
    }
    assert!((c.learned().unwrap() - 8.0).abs() < 1e-9);
    // The service time now reads 60 ms: the same requests served, 9.6 of them at once.
    at += 250;
    c.observe(at * MS, 0.0, false.into(), 60_000.0);
    assert!((c.learned().unwrap() - 9.6).abs() < 1e-9);
}

#[test]
fn windows_under_a_probe_do_not_count_in_what_the_app_served() {
    use crate::route_class::on_one_route;
    let p = LimitParams {
        min: 4.0,
        max: 1000.0,
        tolerance: 1.25,
        floor_window: 30_000 * MS,
        rest: 100.0,
    };
    let w = |at_ms: u64, count: u64, ms: u64, binding: bool, in_flight: u64| Window {
        at: at_ms * MS,
        count: on_one_route([0, 0, count, 0]),
        sum: on_one_route([0, 0, count * ms * MS, 0]),
        min: ms * MS,
        refused: if binding { count } else { 0 },
        waited: 0,
        in_flight,
    };
    let (mut limit, mut c) = (AdaptiveLimit::new(p, 100.0, 0), CapacityEstimate::default());
    // A cold start into a standing queue on 8 workers of 50 ms: a probe measures the
    // floors, admitting min_limit for a second.
    c.learn(&mut limit, p, w(250, 32, 127, false, 50));
    c.learn(&mut limit, p, w(500, 40, 320, false, 50));
    assert_eq!(limit.probe(), Probe::Draining);
    for (at, ms) in [(750, 300), (1000, 52), (1250, 50)] {
        c.learn(&mut limit, p, w(at, 20, ms, true, 6));
    }
    assert_eq!(limit.probe(), Probe::Off);
    // Then 2 s of the queue standing, 160 requests a second served: 8 at once, not what
    // the probe let in spread over the stretch.
    for i in 1..=8 {
        c.learn(&mut limit, p, w(1250 + 250 * i, 40, 300, false, 50));
    }
    let learned = c.learned().expect("saturated");
    assert!((learned - 8.0).abs() < 0.5, "{learned}");
}

#[test]
fn an_app_whose_service_times_fell_twofold_is_learned_afresh() {
    // Learned at 8 requests of 150 ms at once (a cold start three times slower), then the
    // service times read 50 ms: not the app it was learned of. Read at the new scale the
    // capacity would be 8 / 3 requests at once, and the controller would hold the warm app
    // to what it served cold; forgotten, it is learned again at the next saturation.
    let mut c = CapacityEstimate::default();
    c.observe(0, 0.0, false.into(), 150_000.0);
    let mut at = 0;
    for _ in 0..8 {
        at += 250;
        c.observe(at * MS, 8.0 * (250 * MS) as f64, true.into(), 150_000.0);
    }
    assert!((c.learned().unwrap() - 8.0).abs() < 1e-9);
    // A third faster, or slower however much, is read at the new scale.
    at += 250;
    c.observe(at * MS, 0.0, false.into(), 100_000.0);
    assert!((c.learned().unwrap() - 8.0 / 1.5).abs() < 1e-9);
    at += 250;
    c.observe(at * MS, 0.0, false.into(), 450_000.0);
    assert!((c.learned().unwrap() - 24.0).abs() < 1e-9);
    at += 250;
    c.observe(at * MS, 0.0, false.into(), 50_000.0);
    assert_eq!(c.learned(), None);
    for _ in 0..8 {
        at += 250;
        c.observe(at * MS, 8.0 * (250 * MS) as f64, true.into(), 50_000.0);
    }
    // The stretch began with the three quiet windows: 5 of its 8 served 8 at once.
    assert!((c.learned().unwrap() - 5.0).abs() < 1e-9);
}

#[test]
fn a_capacity_learned_while_the_app_was_smaller_grows_back_once_it_is_calm() {
    // 8 at once, then half the workers gone (saturated at 4 for a minute), then the app whole
    // again at a third of its capacity: nothing saturates, and the controller reading demand
    // against 4 would hold the app there. The capacity grows back towards 8.
    let mut e = CapacityEstimate::default();
    let at = run(&mut e, 0, 20, 8.0, true);
    assert!(
        (e.learned().unwrap() - 8.0).abs() < 0.1,
        "{:?}",
        e.learned()
    );
    let at = run(&mut e, at, 60, 4.0, true);
    let low = e.learned().unwrap();
    assert!(low < 4.5, "learned down while smaller: {low}");
    // Calm at 2.7 (a third of 8): nothing for the first 10 s, then back towards the peak.
    let at = run(&mut e, at, 4, 2.7, false);
    assert!(e.learned().unwrap() <= low, "not grown before 10 s of calm");
    run(&mut e, at, 50, 2.7, false);
    let back = e.learned().unwrap();
    assert!(back > 7.0, "grown back: {back}");
    // Held by the controller near the capacity (not under 0.7 of it): no growth.
    let mut held = CapacityEstimate::default();
    let at = run(&mut held, 0, 20, 8.0, true);
    let at = run(&mut held, at, 60, 4.0, true);
    let c = held.learned().unwrap();
    run(&mut held, at, 60, 0.9 * c, false);
    assert!(held.learned().unwrap() <= c + 1e-9, "not grown towards 8");
}

#[test]
fn the_rest_leaves_more_room_for_the_bursts_of_a_mix_whose_times_spread() {
    let p = LimitParams {
        min: 1.0,
        max: 1000.0,
        tolerance: 1.25,
        floor_window: 30_000_000,
        rest: 100.0,
    };
    let mut c = CapacityEstimate::default();
    c.observe(0, 0.0, false.into(), 1.0);
    c.observe(STRETCH_US, 8.0 * STRETCH_US as f64, true.into(), 1.0);
    assert_eq!(c.learned(), Some(8.0));
    // One time on every route, or a mix of routes only a little spread: 1.5 × 8 + 30.
    assert_eq!(c.bounds(p, 0.0, None).rest, 42.0);
    assert_eq!(c.bounds(p, 0.5, None).rest, 42.0);
    // A mix whose times spread more queues longer at the same load (Kingman: the wait grows
    // with (1 + s) / 2, s the squared coefficient of variation of all the times): the slack
    // grows with it. s counts each route's own spread too, taken as a log-normal's of σ 0.5
    // (`WITHIN_ROUTE_SPREAD`, 0.284), so a mix of routes spread 2 is 2.85 in all.
    let rest = |spread: f64| c.bounds(p, spread, None).rest;
    let kingman = |s: f64| ((1.0 + s) * (1.0 + WITHIN_ROUTE_SPREAD)) / 2.0;
    assert!((rest(2.0) - (12.0 + 30.0 * kingman(2.0))).abs() < 1e-9);
    assert!((rest(2.0) - 69.78).abs() < 0.01, "{}", rest(2.0));
    // The real app of the bench (a tenth of its GETs 300 ms reports among 1 ms cache hits
    // and 20 ms reads): its routes spread 4.58, 6.16 in all; the slack is 3.58 times 30.
    assert!((rest(4.58) - 119.47).abs() < 0.01, "{}", rest(4.58));
    // At most four times.
    assert_eq!(rest(8.4), 12.0 + 120.0);
    assert_eq!(rest(50.0), 12.0 + 120.0);
    // Once the service time is known too, the rest leaves critical requests room under their
    // ceiling's cap (8 at once at 50 ms: 8 × (1 + 500 / 50) = 88): at most 0.9 of it.
    let capped = |spread: f64| c.bounds(p, spread, Some(50_000.0)).rest;
    assert_eq!(capped(0.0), 42.0);
    assert!((capped(8.4) - REST_UNDER_CAP * 88.0).abs() < 1e-9);
    assert!((capped(8.4) - 79.2).abs() < 1e-9);
    // But never under the uniform rest: one worker of 50 ms has a cap of 11 (0.5 s of queue),
    // and its bursts at 0.5C need the 30 of slack any app gets.
    let mut one = CapacityEstimate::default();
    one.observe(0, 0.0, false.into(), 1.0);
    one.observe(STRETCH_US, STRETCH_US as f64, true.into(), 1.0);
    assert_eq!(one.bounds(p, 8.4, Some(50_000.0)).rest, 31.5);
    assert_eq!(one.bounds(p, 0.0, Some(50_000.0)).rest, 31.5);
}

#[test]
fn the_lane_is_a_quarter_over_the_capacity_while_it_is_on_and_under_the_critical_cap() {
    let mut c = CapacityEstimate::default();
    let inf = f64::INFINITY;
    assert_eq!(c.lane(true, 12.0), inf, "no capacity known: no lane");
    run(&mut c, 0, 4, 8.0, true);
    assert!(
        (c.lane(true, inf) - 10.0).abs() < 1e-9,
        "{}",
        c.lane(true, inf)
    );
    assert_eq!(c.lane(false, inf), inf, "the lane is off, no cap: no lane");
    // The critical ceiling's cap: the lower tiers stay under 0.9 of it, lane on or off...
    assert!(
        (c.lane(false, 100.0) - 90.0).abs() < 1e-9,
        "{}",
        c.lane(false, 100.0)
    );
    assert!(
        (c.lane(true, 100.0) - 10.0).abs() < 1e-9,
        "{}",
        c.lane(true, 100.0)
    );
    // ...but never under the capacity and the rest's uniform slack (a small app's bursts).
    let cap = ceiling_cap(c.learned().zip(Some(500_000.0)));
    assert!((cap - 12.0).abs() < 1e-9, "{cap}");
    assert!(
        (c.lane(false, cap) - 38.0).abs() < 1e-9,
        "{}",
        c.lane(false, cap)
    );
    assert!(
        (c.lane(true, cap) - 10.0).abs() < 1e-9,
        "{}",
        c.lane(true, cap)
    );
    // At least one, however small the capacity learned.
    let mut tiny = CapacityEstimate::default();
    run(&mut tiny, 0, 4, 0.4, true);
    assert_eq!(tiny.lane(true, cap), 1.0);
}

#[test]
fn the_lane_is_on_while_the_controller_sheds_or_reads_an_overload() {
    // Shedding, whatever the last sample read.
    assert!(lane_on(0.1, 0.5, true));
    // Not yet shedding (the amount climbs from its resting value), an overload read.
    assert!(lane_on(-0.2, 2.1, true));
    assert!(lane_on(0.0, LANE_DEMAND, true));
    // Neither: an app read just full (a calm burst), or an amount back at 0.
    assert!(!lane_on(-0.2, 1.0, true));
    assert!(!lane_on(-0.2, 1.2, true));
    assert!(!lane_on(0.0, 0.5, true));
    // The controller dark or off: never.
    assert!(!lane_on(0.5, 3.0, false));
}

#[test]
fn waits_the_lane_held_are_not_the_limits() {
    let window = Window {
        waited: 5,
        refused: 2,
        ..Window::default()
    };
    let mut under_lane = window;
    lane_waits(&mut under_lane, 10.0, 16.0);
    assert_eq!(
        (under_lane.waited, under_lane.refused),
        (0, 2),
        "refusals still bind"
    );
    let mut under_limit = window;
    lane_waits(&mut under_limit, 10.0, 8.0);
    assert_eq!(under_limit.waited, 5, "the limit held them");
    let mut no_lane = window;
    lane_waits(&mut no_lane, f64::INFINITY, 8.0);
    assert_eq!(no_lane.waited, 5);
}

#[test]
fn a_window_is_held_back_only_with_a_fiftieth_of_its_requests_refused_or_waiting() {
    let w = |total: u64, refused: u64, waited: u64| {
        let mut count = [0; crate::route_class::CLASSES];
        count[2] = total;
        Window {
            count,
            refused,
            waited,
            ..Window::default()
        }
    };
    assert!(!held_back(&w(100, 0, 0)), "nothing refused");
    assert!(held_back(&w(5, 1, 0)), "one of a few");
    assert!(held_back(&w(100, 1, 1)), "2 of 100");
    assert!(!held_back(&w(150, 0, 2)), "2 of 150 waited: a burst");
    assert!(held_back(&w(0, 3, 0)), "refused, nothing finished");
}
