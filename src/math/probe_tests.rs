//! The floor probe's tests: when the service times are measured afresh, and when traffic
//! confirms them.

use super::super::tests::{full, params, window, MS};
use super::super::*;

/// A limit whose floor was measured at 50 ms, then binding windows of 75 ms until it probes
/// for drift; returns it and when (ms).
fn probing_for_drift() -> (AdaptiveLimit, u64) {
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.update(window(250, 10, 50, false));
    let mut at = 250;
    while l.probe() == Probe::Off {
        at += 250;
        l.update(window(at, 10, 75, true));
        assert!(at <= 60_500, "no probe by {at} ms");
    }
    (l, at)
}

#[test]
fn a_binding_limit_whose_floor_is_not_confirmed_measures_it_afresh() {
    // Requests take 75 ms and the limit keeps binding (at min, too little for a stale
    // floor). At 30 s the 50 ms request of the first window still confirms the floor;
    // by 60 s nothing has for 30 s.
    let (mut l, at) = probing_for_drift();
    assert!(at >= 60_000, "probed at {at} ms");
    assert_eq!(l.limit(), 4.0, "admits min_limit while measuring");
    l.update(window(at + 250, 10, 300, true)); // draining: ignored
    assert_eq!(l.probe(), Probe::Measuring);
    l.update(window(at + 500, 4, 100, true)); // measured at low concurrency
    assert_eq!(l.probe(), Probe::Off);
    assert_eq!(
        l.service().floors()[2],
        Some(100 * MS),
        "the new floor replaces the old one"
    );
    assert!(l.limit() >= 4.0);
}

#[test]
fn a_floor_that_traffic_keeps_confirming_needs_no_probe() {
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.update(window(250, 10, 50, false));
    // Binding for two minutes, mean latency 60 ms, but some request as fast as 54 ms
    // (within 10% of the 50 ms floor) in every window: no probe.
    for i in 2..=480 {
        let mut w = window(250 * i, 10, 60, true);
        w.min = 54 * MS;
        l.update(w);
        assert_eq!(l.probe(), Probe::Off, "at {} ms", 250 * i);
    }
    // Once the fastest is 56 ms (the floor may have crept), the next due probe comes.
    let mut at = 480 * 250;
    while l.probe() == Probe::Off {
        at += 250;
        let mut w = window(at, 10, 60, true);
        w.min = 56 * MS;
        l.update(w);
        assert!(at <= 480 * 250 + 30_250, "no probe by {at} ms");
    }
}

#[test]
fn a_server_that_got_slower_has_its_floor_measured_at_once() {
    let mut l = AdaptiveLimit::new(params(), 20.0, 0);
    l.update(window(250, 10, 50, false));
    // Service time doubles: after SUSTAINED binding windows, 20 → 10 → 5 → min (4) in three
    // windows, then two windows at min with requests still ≥ 2 × the floor: a probe, long
    // before floor_window (30 s).
    let mut at = 250;
    while l.probe() == Probe::Off {
        at += 250;
        l.update(full(&l, at, 10, 130));
        assert!(at <= 2_500, "no probe by {at} ms");
    }
    assert_eq!(
        at,
        250 + 250 * (u64::from(SUSTAINED) - 1 + 5),
        "the cut waits, three windows down to min, two there"
    );
    l.update(window(at + 250, 4, 130, true)); // draining
    l.update(window(at + 500, 4, 100, true)); // measuring
    assert_eq!(l.probe(), Probe::Off);
    assert_eq!(l.service().floors()[2], Some(100 * MS));
    // Against the new floor, 110 ms is within tolerance: the limit grows again.
    assert!(l.update(full(&l, at + 750, 10, 110)) > 4.0);

    // At min with requests 1.4 × the floor (a queue of critical requests the limit does
    // not count): no probe before floor_window.
    let mut l = AdaptiveLimit::new(params(), 4.0, 0);
    l.update(window(250, 10, 50, false));
    for i in 2..=100 {
        l.update(window(250 * i, 10, 70, true));
        assert_eq!(l.probe(), Probe::Off, "at {} ms", 250 * i);
    }
    // One slow window between ordinary ones is not two in a row.
    for i in 101..=140 {
        let latency = if i % 2 == 0 { 120 } else { 70 };
        l.update(window(250 * i, 10, latency, true));
        assert_eq!(l.probe(), Probe::Off, "at {} ms", 250 * i);
    }
}

#[test]
fn a_probe_for_drift_lowers_confirmed_floors_by_at_most_the_drift() {
    // Floors confirmed at 50 ms; then a queue (75 ms, binding) for over 30 s without a
    // request near 50 ms: a probe for drift. Its window's requests took 20 ms: a few fast ones
    // of a route whose times spread (the slow ones finish after the window), not a faster app.
    for requests in [20, 4] {
        let (mut l, at) = probing_for_drift();
        l.update(window(at + 250, 10, 300, true)); // draining
        l.update(window(at + 500, requests, 20, true)); // measuring
        assert_eq!(l.probe(), Probe::Off);
        let floor = l.service().floors()[2].unwrap() as f64;
        let lowest = 50.0 * MS as f64 / FLOOR_DRIFT;
        assert!(
            (floor - lowest).abs() <= 1.0,
            "{requests} requests: {floor} µs, not below {lowest}"
        );
    }
}
