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
    assert_eq!(base.update(&window(100, Some(20)), 40.0, true), 40.0);
    assert_eq!(base.update(&window(200, Some(190)), 20.0, true), 40.0);
    assert_eq!(base.update(&window(300, Some(60)), 10.0, true), 10.0);
    // Never more than a window back, however long the latency.
    assert_eq!(base.update(&window(400, Some(900)), 5.0, true), 10.0);
    assert_eq!(base.update(&window(500, Some(900)), 2.5, true), 5.0);
    // The queue drained: latency back at the service time, the base is the limit.
    assert_eq!(base.update(&window(600, Some(20)), 2.0, true), 2.0);
    // It never stands below the limit learned now.
    assert_eq!(base.update(&window(700, Some(20)), 6.0, true), 6.0);
    // Nothing finished in a window: every remembered limit may still be in flight.
    assert_eq!(base.update(&window(800, None), 3.0, true), 6.0);
    // Once the capacity is known, the base is the limit learned now, whatever came before.
    assert_eq!(base.update(&window(900, Some(900)), 2.0, false), 2.0);
    assert_eq!(base.update(&window(1000, None), 1.5, true), 1.5);
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
