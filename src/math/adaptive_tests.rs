//! The adaptive limit's tests: its gradient, floor probes, quiet windows and hold.

use super::*;
use crate::route_class::on_one_route;

pub(super) const MS: u64 = 1000;

pub(super) fn params() -> LimitParams {
    LimitParams {
        min: 4.0,
        max: 1000.0,
        tolerance: 1.25,
        floor_window: 30_000 * MS,
        rest: 20.0,
    }
}

/// A window ending at `at_ms` of `count` requests of `latency_ms` each; if `binding`, the
/// limit refused twice as many as finished (an overload of three times what the app serves).
pub(super) fn window(at_ms: u64, count: u64, latency_ms: u64, binding: bool) -> Window {
    Window {
        at: at_ms * MS,
        count: on_one_route([0, 0, count, 0]),
        sum: on_one_route([0, 0, count * latency_ms * MS, 0]),
        min: latency_ms * MS,
        refused: if binding { 2 * count } else { 0 },
        waited: 0,
        in_flight: 0,
    }
}

/// A window in which the limit refused requests while it was full (as many in flight as it
/// admits: the queue stood to the window's end).
pub(super) fn full(l: &AdaptiveLimit, at_ms: u64, count: u64, latency_ms: u64) -> Window {
    Window {
        in_flight: l.limit().ceil() as u64,
        ..window(at_ms, count, latency_ms, true)
    }
}

/// `n` windows of `full` from `at_ms` on, one every 250 ms; returns the last one's end.
fn overload(l: &mut AdaptiveLimit, at_ms: u64, n: u64, latency_ms: u64) -> u64 {
    let mut at = at_ms;
    for _ in 0..n {
        at += 250;
        l.update(full(l, at, 10, latency_ms));
    }
    at
}

#[test]
fn within_tolerance_the_limit_holds_and_grows_only_when_it_binds() {
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    assert_eq!(l.update(window(250, 10, 50, false)), 20.0);
    assert_eq!(l.service().floors()[2], Some(50 * MS));
    // 60 ms is within 1.25 × 50: the limit refused requests, so it grows by √20.
    let grown = l.update(window(500, 10, 60, true));
    assert!((grown - (20.0 + 20f64.sqrt())).abs() < 1e-9, "{grown}");
    // Slower than that while refusing nothing: the limit was not what the load met, and it
    // does not shrink by the gradient; above its rest (20) it only comes back to it.
    assert_eq!(l.update(window(750, 10, 200, false)), 20.0);
    let mut l = AdaptiveLimit::new(params(), 10.0, 0);
    // The route's first requests are a warm-up (`service::WARMUP`), dropped at the next.
    l.update(window(0, 10, 50, false));
    let below = l.update(window(250, 10, 50, false));
    assert!(below < 20.0);
    assert_eq!(
        l.update(window(500, 10, 200, false)),
        below,
        "below its rest: unchanged"
    );
}

/// A limit at its rest of 40 that learned a floor of 50 ms, `in_flight` at the window's end.
fn at_rest(in_flight: u64) -> AdaptiveLimit {
    let rest = LimitParams {
        rest: 40.0,
        ..params()
    };
    let mut l = AdaptiveLimit::new(rest, 40.0, 0);
    l.update(holding(250, 10, 50, false, in_flight));
    l
}

#[test]
fn queueing_shrinks_the_limit_by_the_gradient_at_most_halving_it() {
    let mut l = at_rest(0);
    // A queue the app absorbed: binding, slow, but fewer than half the limit in flight by the
    // window's end. No cut.
    let mut drained = window(500, 10, 100, true);
    drained.in_flight = 19;
    assert_eq!(l.update(drained), 40.0);
    // A queue that stands: not cut before SUSTAINED binding windows in a row.
    for i in 1..SUSTAINED {
        assert_eq!(l.update(full(&l, 500 + 250 * u64::from(i), 10, 100)), 40.0);
    }
    // Then 100 ms against 1.25 × 50: gradient 0.625, and no headroom added.
    assert!((l.update(full(&l, 1500, 10, 100)) - 25.0).abs() < 1e-9);
    // 1 s: the gradient stops at 0.5.
    assert!((l.update(full(&l, 1750, 10, 1000)) - 12.5).abs() < 1e-9);
    // 6.25, then min (4); not below it.
    overload(&mut l, 1750, 3, 1000);
    assert_eq!(l.limit(), 4.0, "never below min");
}

#[test]
fn a_standing_queue_is_cut_by_no_more_than_the_share_of_arrivals_the_app_did_not_finish() {
    // The queue of a moderate load after a few slow requests held every worker: binding
    // windows with the limit full (40, 38, 36 in flight), requests twice their service time,
    // but fewer came than finished (one refused, and 10 − 2 let in): the app is absorbing
    // it, and the limit is not cut. Held (worker_utilization sheds: the overload is known),
    // the same windows cut it by the gradient (0.625).
    for (hold, cut) in [(false, 40.0), (true, 25.0)] {
        let mut l = at_rest(40);
        l.set_hold(hold);
        let mut limit = 0.0;
        for (i, in_flight) in [40, 38, 36].into_iter().enumerate() {
            let w = holding(500 + 250 * i as u64, 10, 100, false, in_flight);
            limit = l.update(Window { refused: 1, ..w });
        }
        assert!((limit - cut).abs() < 1e-9, "held {hold}: {limit}");
    }
    // A queue that stands (40 in flight), and in each window 11 came and 10 finished: a
    // tenth came beyond what the app finished, so the limit loses 1/11 of itself.
    let mut l = at_rest(40);
    let mut limit = 0.0;
    for i in 1..=SUSTAINED {
        let w = holding(250 + 250 * u64::from(i), 10, 100, false, 40);
        limit = l.update(Window { refused: 1, ..w });
    }
    assert!((limit - 40.0 * 10.0 / 11.0).abs() < 1e-9, "{limit}");
}

#[test]
fn once_the_capacity_is_known_a_queue_is_cut_by_no_more_than_what_came_beyond_what_it_serves() {
    // A few slow requests hold every worker: in each of SUSTAINED windows (250 ms) two
    // finish, at 400 ms, while 14 are let in and one refused. By what finished, 13 of every
    // 15 that came are unfinished, and the gradient (1.25 × 50 / 400) halves the limit. But
    // 15 a window is what an app serving 4 at once at 50 ms serves in 190 ms: it carries this
    // load, and once that capacity is known the limit is not cut. Known at 2 (it serves 10 a
    // window), the third that came beyond it is the most cut (40 × 2 / 3). Held (the
    // controller sheds), the gradient cuts as before.
    for (capacity, hold, cut) in [
        (None, false, 20.0),
        (Some(4.0), false, 40.0),
        (Some(2.0), false, 40.0 * 2.0 / 3.0),
        (Some(4.0), true, 20.0),
    ] {
        let mut l = at_rest(40);
        l.set_capacity(capacity);
        l.set_hold(hold);
        let mut limit = 0.0;
        for i in 1..=SUSTAINED {
            let w = holding(
                250 + 250 * u64::from(i),
                2,
                400,
                false,
                40 + 12 * u64::from(i),
            );
            limit = l.update(Window { refused: 1, ..w });
        }
        assert!(
            (limit - cut).abs() < 1e-9,
            "{capacity:?}, held {hold}: {limit}"
        );
    }
}

#[test]
fn chance_is_judged_over_windows_one_slow_window_neither_pulls_the_floor_low_nor_cuts_alone() {
    // Windows of a few requests spread log-normally, never refused: now 40 ms, now 70 ms
    // (1.75 times the faster ones by chance). Judged one by one, every 70 ms window would be
    // left out as a queue and the floor pinned at 40 ms; judged with the two before it, none
    // is, and the floor is the route's: its samples of 50 requests average 52–58 ms.
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    for i in 0..60 {
        l.update(window(
            250 * (i + 1),
            10,
            if i % 2 == 0 { 40 } else { 70 },
            false,
        ));
    }
    let floor = l.service().floors()[2].unwrap() as f64 / MS as f64;
    assert!((50.0..=58.0).contains(&floor), "{floor}");
    // A queue that stood SUSTAINED windows is cut by the gradient of all of them: 70, 70 and
    // 100 ms against a 50 ms floor read 1.25 × 150 ÷ 240, not 1.25 × 50 ÷ 100 for the last.
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.update(window(250, 20, 50, false));
    assert_eq!(l.update(full(&l, 500, 10, 70)), 20.0);
    assert_eq!(l.update(full(&l, 750, 10, 70)), 20.0);
    let cut = l.update(full(&l, 1000, 10, 100));
    assert!((cut - 20.0 * 1.25 * 150.0 / 240.0).abs() < 1e-9, "{cut}");
}

#[test]
fn through_an_overload_the_windows_fast_by_chance_do_not_pull_the_floor_low() {
    // A 50 ms route learned while quiet, then 50 s of overload: the limit refuses in every
    // window and its queue makes requests take 90 ms, but one window in three is 45 ms by
    // chance (a few log-normal requests). Keeping those because they were faster than
    // expected, and only those once the quiet samples aged out, read the route at 45 ms.
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    let mut at = 0;
    for _ in 0..20 {
        at += 250;
        l.update(window(at, 10, 50, false));
    }
    assert_eq!(l.service().floors()[2], Some(50 * MS));
    for i in 0..200 {
        at += 250;
        l.update(full(&l, at, 10, if i % 3 == 2 { 45 } else { 90 }));
    }
    assert_eq!(l.probe(), Probe::Off);
    assert_eq!(l.service().floors()[2], Some(50 * MS));
}

#[test]
fn it_settles_where_latency_is_the_tolerated_multiple_of_the_floor() {
    // A server of 8 workers × 50 ms with a FIFO queue: latency 50 ms × max(1, n/8).
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.update(window(250, 10, 50, false));
    let mut at = 250;
    for _ in 0..400 {
        at += 250;
        let n = l.limit();
        let latency = (50.0 * (n / 8.0).max(1.0)) as u64;
        l.update(full(&l, at, 40, latency));
    }
    // Between probes the limit moves around the point where latency is 1.25 × the floor,
    // L = 1.25 × 8 = 10: at or below it, it grows by √L; above it, it shrinks.
    let settled = l.limit();
    assert!(
        settled == 4.0 || (8.0..=14.0).contains(&settled),
        "{settled}"
    );
}

#[test]
fn a_limit_that_does_not_bind_never_probes_and_quiet_windows_change_nothing() {
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    for i in 1..=400 {
        l.update(window(250 * i, 5, 50, false));
        assert_eq!(l.probe(), Probe::Off);
    }
    assert_eq!(l.limit(), 20.0);
    assert_eq!(
        l.update(Window {
            at: 200_000 * MS,
            ..Window::default()
        }),
        20.0
    );
}

#[test]
fn a_held_limit_keeps_what_overload_taught_it_through_quiet_windows() {
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.update(window(250, 10, 50, false));
    let mut at = overload(&mut l, 250, u64::from(SUSTAINED) + 1, 1000);
    assert!((l.limit() - 5.0).abs() < 1e-9);
    // While the controller sheds, quiet windows leave it there.
    l.set_hold(true);
    for _ in 0..20 {
        at += 250;
        assert!((l.update(window(at, 10, 55, false)) - 5.0).abs() < 1e-9);
    }
    // Binding windows still move it as ever.
    at += 250;
    let grown = l.update(full(&l, at, 10, 55));
    assert!((grown - (5.0 + 5f64.sqrt())).abs() < 1e-9, "{grown}");
    // Once the controller stops, the limit goes back to rest.
    l.set_hold(false);
    for _ in 0..20 {
        at += 250;
        l.update(window(at, 10, 55, false));
    }
    assert_eq!(l.limit(), 20.0);
}

#[test]
fn quiet_windows_bring_a_shrunk_limit_back_to_rest_and_no_further() {
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    // The route's first requests are a warm-up (`service::WARMUP`), dropped at the next.
    l.update(window(0, 10, 50, false));
    l.update(window(250, 10, 50, false));
    // An overload halves it twice: 5.
    let at = overload(&mut l, 250, u64::from(SUSTAINED) + 1, 1000);
    assert!((l.limit() - 5.0).abs() < 1e-9);
    // Quiet but slow (200 ms): not yet.
    assert!((l.update(window(at + 250, 10, 200, false)) - 5.0).abs() < 1e-9);
    // Quiet and within tolerance: +√limit per window, up to rest (20).
    let grown = l.update(window(at + 500, 10, 55, false));
    assert!((grown - (5.0 + 5f64.sqrt())).abs() < 1e-9, "{grown}");
    let mut at = at + 500;
    for _ in 0..20 {
        at += 250;
        l.update(window(at, 10, 55, false));
    }
    assert_eq!(l.limit(), 20.0);
    // A window in which nothing finished changes nothing.
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.update(window(250, 10, 50, false));
    let at = overload(&mut l, 250, u64::from(SUSTAINED), 1000);
    assert_eq!(
        l.update(Window {
            at: (at + 250) * MS,
            ..Window::default()
        }),
        10.0
    );
}

#[test]
fn new_bounds_clamp_the_limit() {
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.set_params(LimitParams {
        max: 10.0,
        ..params()
    });
    assert_eq!(l.limit(), 10.0);
}

#[test]
fn until_the_capacity_is_known_a_limit_that_refused_fast_requests_doubles() {
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.set_slow_start(true);
    l.update(window(250, 10, 500, false));
    // A refusal of tier_hold with little in flight says nothing of the app: √limit.
    let mut idle = window(300, 40, 500, true);
    idle.in_flight = 2;
    let grown = l.update(idle);
    assert!((grown - (20.0 + 20f64.sqrt())).abs() < 1e-9, "{grown}");
    // A big app at half its capacity: many in flight at the floor, the limit in use and
    // refusing. Its first such window's requests were let in before the limit bound (the
    // window began at 300 ms, when it was not yet full): √limit...
    let busy = |at, ms| Window {
        in_flight: 1000,
        ..window(at, 40, ms, true)
    };
    assert!((l.update(busy(800, 500)) - (grown + grown.sqrt())).abs() < 1e-9);
    // ... and a window that began a service time after the limit began to bind doubles it...
    let before = l.limit();
    assert!((l.update(busy(1000, 500)) - 2.0 * before).abs() < 1e-9);
    // ... not again before what it let in has had a service time to show in the latencies.
    let before = l.limit();
    assert!((l.update(busy(1300, 500)) - (before + before.sqrt())).abs() < 1e-9);
    let before = l.limit();
    assert!((l.update(busy(1600, 500)) - 2.0 * before).abs() < 1e-9);
    // Requests slower than without a queue: the ordinary rule.
    let before = l.limit();
    assert!((l.update(busy(2200, 600)) - (before + before.sqrt())).abs() < 1e-9);
    // Known: back to √limit.
    l.set_slow_start(false);
    let before = l.limit();
    assert!((l.update(busy(2800, 500)) - (before + before.sqrt())).abs() < 1e-9);
}

#[test]
fn the_first_requests_to_finish_do_not_pin_a_floor_below_the_route() {
    // A cold start: the first window holds the two fastest requests of a route of 60 ms.
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.update(window(250, 2, 20, false));
    assert_eq!(l.service().floors()[2], Some(20 * MS));
    // Every window after reads three times that: not a queue the floor must ignore until
    // the route has a whole sample of its own.
    for i in 2..=7 {
        l.update(window(250 * i, 10, 60, false));
    }
    let floor = l.service().floors()[2].unwrap();
    assert!(floor >= 55 * MS, "{floor}");
    // Once it has, a window three times slower is a queue again, and left out.
    l.update(window(2000, 10, 180, false));
    assert_eq!(l.service().floors()[2], Some(floor));
}

/// A window ending at `at_ms` of `count` requests of `latency_ms`, `in_flight` at its end.
fn holding(at_ms: u64, count: u64, latency_ms: u64, binding: bool, in_flight: u64) -> Window {
    Window {
        in_flight,
        ..window(at_ms, count, latency_ms, binding)
    }
}

#[test]
fn a_cold_start_into_a_queue_the_limit_admits_has_its_floors_measured() {
    // 50 clients at once on 8 workers of 50 ms, under an initial limit of 100 that refuses
    // none: the first requests to finish waited behind others (a mean of 127 ms, 50 in flight
    // at the window's end, where they kept 16 busy on average).
    let mut l = AdaptiveLimit::new(params(), 100.0, 0);
    l.update(holding(250, 32, 127, false, 50));
    assert_eq!(l.service().floors()[2], Some(127 * MS));
    // The queue stands (320 ms each, still 50 in flight): read against floors learned under
    // it, it would never look like one again. A probe admits min_limit...
    l.update(holding(500, 40, 320, false, 50));
    assert_eq!((l.probe(), l.limit()), (Probe::Draining, 4.0));
    // ... until what is in flight stops falling (critical requests, which it does not refuse,
    // keep 6 in flight: more than min_limit) ...
    l.update(holding(750, 40, 300, true, 6));
    assert_eq!(l.probe(), Probe::Draining);
    l.update(holding(1000, 20, 52, true, 6));
    assert_eq!(l.probe(), Probe::Measuring);
    // ... and measures: slower than the floors would be a queue of critical requests, faster
    // says the floors were learned under one.
    l.update(holding(1250, 20, 50, true, 6));
    assert_eq!(l.probe(), Probe::Off);
    assert_eq!(l.service().floors()[2], Some(50 * MS));
    // Measured, the route is judged at once: the next queue reads as one.
    l.update(holding(1500, 40, 320, false, 50));
    assert_eq!(l.service().floors()[2], Some(50 * MS));
}

#[test]
fn first_floors_a_quiet_window_confirms_need_no_probe() {
    // Two workers of 10 ms at half their capacity: the first window ends with a burst of 3
    // in flight where its requests kept 0.4 busy on average.
    let start = |l: &mut AdaptiveLimit| l.update(holding(250, 10, 10, false, 3));
    // A queue standing right after: every one of 20 requests four times slower than the
    // floor, 30 in flight. The floors are measured.
    let mut l = AdaptiveLimit::new(params(), 100.0, 0);
    start(&mut l);
    l.update(holding(500, 20, 40, false, 30));
    assert_eq!(l.probe(), Probe::Draining);
    // The same queue after a window without one: the floors stand as measured, and the
    // queue is the app's own, not a reason to drain it.
    let mut l = AdaptiveLimit::new(params(), 100.0, 0);
    start(&mut l);
    l.update(holding(500, 10, 10, false, 1));
    for i in 3..=6 {
        l.update(holding(250 * i, 20, 40, false, 30));
        assert_eq!(l.probe(), Probe::Off);
    }
}
