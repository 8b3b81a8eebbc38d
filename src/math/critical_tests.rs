//! Tests of `math/critical.rs`.

use super::*;

fn window(at_ms: u64, mean_ms: Option<u64>) -> Window {
    let mut w = Window {
        at: at_ms * 1000,
        ..Window::default()
    };
    if let Some(mean) = mean_ms {
        w.count[0] = 10;
        w.sum[0] = 10 * mean * 1000;
    }
    w
}

#[test]
fn the_ceiling_base_falls_no_faster_than_what_was_let_in_drains() {
    let mut base = CeilingBase::default();
    // In slow start, a limit of 40 meets a queue and halves every 100 ms window while the
    // requests it let in take up to 200 ms: the base keeps the limits of the last mean
    // latency.
    assert_eq!(base.update(&window(100, Some(20)), 40.0, None), 40.0);
    assert_eq!(base.update(&window(200, Some(190)), 20.0, None), 40.0);
    assert_eq!(base.update(&window(300, Some(60)), 10.0, None), 10.0);
    // Never more than a window back, however long the latency.
    assert_eq!(base.update(&window(400, Some(900)), 5.0, None), 10.0);
    assert_eq!(base.update(&window(500, Some(900)), 2.5, None), 5.0);
    // The queue drained: latency back at the service time, the base is the limit.
    assert_eq!(base.update(&window(600, Some(20)), 2.0, None), 2.0);
    // It never stands below the limit learned now.
    assert_eq!(base.update(&window(700, Some(20)), 6.0, None), 6.0);
    // Nothing finished in a window: every remembered limit may still be in flight.
    assert_eq!(base.update(&window(800, None), 3.0, None), 6.0);
    // Once the capacity is known, the base is the limit learned now, whatever came before.
    let known = Known {
        capacity: 1.0,
        service_us: 500_000.0,
        ceiling: 4.0,
    };
    assert_eq!(base.update(&window(900, Some(900)), 2.0, Some(known)), 2.0);
    assert_eq!(base.update(&window(1000, None), 1.5, None), 1.5);
}

#[test]
fn once_the_capacity_is_known_the_ceiling_holds_half_a_second_of_queue() {
    let mut base = CeilingBase::default();
    // Two workers of 10 ms (2.6 learned): a limit cut to 1 by the critical requests' own
    // queue would make the ceiling 4 in flight; it is the capacity and half a second of
    // queue (130 requests at 260 a second), a base of 132.6 / 4.
    let fast = Known {
        capacity: 2.6,
        service_us: 10_000.0,
        ceiling: 4.0,
    };
    let at_least = 2.6 * 51.0 / 4.0;
    assert_eq!(
        base.update(&window(100, Some(40)), 1.0, Some(fast)),
        at_least
    );
    assert_eq!(base.update(&window(200, Some(10)), 40.0, Some(fast)), 40.0);
    // 100 workers of 500 ms: half a second of queue is 100 requests, the ceiling 200.
    let slow = Known {
        capacity: 100.0,
        service_us: 500_000.0,
        ceiling: 4.0,
    };
    assert_eq!(base.update(&window(300, Some(900)), 40.0, Some(slow)), 50.0);
    assert_eq!(base.update(&window(400, Some(900)), 80.0, Some(slow)), 80.0);
    // No service time to size a queue by: the capacity alone.
    let unknown = Known {
        service_us: 0.0,
        ..slow
    };
    assert_eq!(base.update(&window(500, None), 20.0, Some(unknown)), 25.0);
    // The capacity forgotten: the limit learned again.
    assert_eq!(base.update(&window(600, Some(20)), 3.0, None), 3.0);
}

#[test]
fn once_the_capacity_is_known_critical_requests_queue_no_deeper_than_their_time_allows() {
    // 100 workers of 500 ms: a queue of a quarter of a second (50 requests) leaves a
    // critical request 750 ms in the app; the ceiling is 150 in flight, whatever the limit.
    // (The capacity, and the service time in µs it is read at.)
    assert_eq!(ceiling_cap(Some((100.0, 500_000.0))), 150.0);
    // 8 workers of 50 ms, 32 of 200 ms: half a second of queue.
    assert_eq!(ceiling_cap(Some((8.0, 50_000.0))), 88.0);
    assert_eq!(ceiling_cap(Some((32.0, 200_000.0))), 112.0);
    // A second a request: no queue at all. Not known, or no service time: no cap.
    assert_eq!(ceiling_cap(Some((100.0, 1_000_000.0))), 100.0);
    assert_eq!(ceiling_cap(Some((100.0, 0.0))), f64::INFINITY);
    assert_eq!(ceiling_cap(None), f64::INFINITY);
    // The ceiling: critical_ceiling times the limit (or its base), at most the cap, and never
    // below the limit (where a GET is let in, a critical request is too).
    assert_eq!(ceiling(30.0, 50.0, 4.0, 150.0), 150.0);
    assert_eq!(ceiling(30.0, 20.0, 4.0, f64::INFINITY), 120.0);
    assert_eq!(ceiling(182.0, 50.0, 4.0, 150.0), 182.0);
}

#[test]
fn the_critical_share_backs_off_on_overflow_and_comes_back() {
    use CriticalPressure::*;
    assert!((critical_share(1.0, Overflowed) - 0.9).abs() < 1e-12);
    assert!((critical_share(0.9, Overflowed) - 0.81).abs() < 1e-12);
    assert!((critical_share(0.81, AtLimit) - 0.86).abs() < 1e-12);
    assert_eq!(critical_share(0.99, AtLimit), 1.0, "never above everyone");
    assert_eq!(critical_share(0.055, Overflowed), CRITICAL_MIN_SHARE);
    // From the floor, four clear windows let everyone in again.
    let mut share = CRITICAL_MIN_SHARE;
    for _ in 0..4 {
        share = critical_share(share, Clear);
    }
    assert_eq!(share, 1.0);
}

#[test]
fn the_cap_stays_over_a_limit_whose_requests_are_still_in_flight() {
    // 100 workers of 500 ms stepped into 2C: the limit was 167 before the capacity was
    // known; the window that learns it (cap 150) ends within a mean latency of the last, so
    // the requests let in under 167 may still be in flight, and the cap is 167.
    let mut base = CeilingBase::default();
    base.update(&window(1000, Some(500)), 167.0, None);
    assert_eq!(base.cap(), f64::INFINITY, "no capacity: no cap");
    let known = Known {
        capacity: 100.0,
        service_us: 500_000.0,
        ceiling: 4.0,
    };
    base.update(&window(1250, Some(500)), 155.0, Some(known));
    assert_eq!(base.cap(), 167.0);
    // What the lower tiers keep room under is the cap alone.
    assert_eq!(base.in_time(), 150.0);
    // A mean latency later, the cap is its own (over the limit of the last window, 155).
    base.update(&window(1500, Some(500)), 155.0, Some(known));
    assert_eq!(base.cap(), 155.0);
    base.update(&window(2250, Some(500)), 140.0, Some(known));
    assert_eq!(base.cap(), 150.0);
}
