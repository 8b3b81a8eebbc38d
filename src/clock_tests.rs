//! Tests of `clock.rs`.

use super::*;

#[test]
fn manual_clock_moves_only_when_told() {
    let c = ManualClock::new();
    assert_eq!(c.now(), Duration::ZERO);
    c.advance(Duration::from_millis(1500));
    assert_eq!(c.now(), Duration::from_millis(1500));
    c.set(Duration::from_secs(1));
    assert_eq!(c.now(), Duration::from_secs(1));
}

#[test]
fn system_clock_is_monotonic_and_keeps_real_time() {
    let c = SystemClock::new();
    let wall = std::time::Instant::now();
    let a = c.now();
    let b = c.now();
    assert!(b >= a);
    // Busy-wait 20 ms of wall time (no sleep): the clock must agree within 5 ms.
    while wall.elapsed() < Duration::from_millis(20) {
        std::hint::spin_loop();
    }
    let (ours, real) = (c.now(), wall.elapsed());
    let diff = ours.abs_diff(real);
    assert!(
        diff < Duration::from_millis(5),
        "clock {ours:?} vs wall {real:?}"
    );
}
