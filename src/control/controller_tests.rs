//! Unit tests of `controller.rs`.

use super::*;

const EPS: f64 = 1e-12;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Runs `n` samples of `u`, 8 s apart, starting after `start`; returns the amounts.
fn run(c: &mut Controller, u: f64, start: u64, n: u64) -> Vec<f64> {
    (1..=n).map(|i| c.update(u, secs(start + 8 * i))).collect()
}

#[test]
fn resting_value_is_a_real_number() {
    let p = ControllerParams::default();
    assert!((p.resting() - (-28.0 / 120.0)).abs() < EPS);
    assert!((p.resting() + 0.233_333).abs() < 1e-6);
}

#[test]
fn derivative_piecewise() {
    let p = ControllerParams::default();
    assert!((p.derivative(0.0) - (-1.0 / 120.0)).abs() < EPS);
    assert!((p.derivative(0.35) - (-0.5 / 120.0)).abs() < EPS);
    assert_eq!(p.derivative(0.7), 0.0);
    assert_eq!(p.derivative(0.79), 0.0);
    assert_eq!(p.derivative(0.8), 0.0);
    assert!((p.derivative(0.9) - (0.5 / 120.0)).abs() < EPS);
    assert!((p.derivative(1.0) - (1.0 / 120.0)).abs() < EPS);
    // Out-of-range input is clamped.
    assert_eq!(p.derivative(7.0), p.derivative(1.0));
    assert_eq!(p.derivative(-3.0), p.derivative(0.0));
}

#[test]
fn from_rest_a_bad_server_waits_then_sheds_everything() {
    let mut c = Controller::new(ControllerParams::default(), secs(0));
    let amounts = run(&mut c, 1.0, 0, 19);
    // Samples at 8, 16, 24 s: still not shedding.
    assert!(amounts[2] <= 0.0, "at 24 s: {}", amounts[2]);
    assert!((amounts[2] - (-0.2333333333333 + 0.2)).abs() < 1e-9);
    // At 32 s shedding has begun.
    assert!(amounts[3] > 0.0, "at 32 s: {}", amounts[3]);
    // Not everything at 144 s, everything by 152 s.
    assert!(amounts[17] < 1.0, "at 144 s: {}", amounts[17]);
    assert_eq!(amounts[18], 1.0, "at 152 s");
}

#[test]
fn dead_zone_holds_the_amount() {
    let mut c = Controller::new(ControllerParams::default(), secs(0));
    run(&mut c, 1.0, 0, 8);
    let held = c.amount();
    for u in [0.7, 0.75, 0.7999] {
        let amounts = run(&mut c, u, 64, 5);
        assert!(
            amounts.iter().all(|a| (a - held).abs() < EPS),
            "{u}: {amounts:?}"
        );
    }
}

#[test]
fn recovery_is_gradual_and_returns_to_rest() {
    let mut c = Controller::new(ControllerParams::default(), secs(0));
    run(&mut c, 1.0, 0, 19);
    assert_eq!(c.amount(), 1.0);
    // At u = 0 the amount falls 8/120 per sample: after one sample it is still high.
    let first = c.update(0.0, secs(152 + 8));
    assert!((first - (1.0 - 8.0 / 120.0)).abs() < 1e-9);
    let amounts = run(&mut c, 0.0, 160, 18);
    let rest = ControllerParams::default().resting();
    assert!(amounts[16] > rest, "rested too early");
    assert!((amounts[17] - rest).abs() < EPS, "{amounts:?}");
    // And it stays at rest.
    assert!((c.update(0.0, secs(10_000)) - rest).abs() < EPS);
}

#[test]
fn elapsed_time_is_clamped() {
    let mut c = Controller::new(ControllerParams::default(), secs(0));
    // One sample after an hour counts as 28 s at most.
    let a = c.update(1.0, secs(3600));
    assert!((a - (-28.0 / 120.0 + 28.0 / 120.0)).abs() < EPS);
    // A clock that goes backwards moves nothing.
    let b = c.update(1.0, secs(10));
    assert_eq!(a, b);
}

#[test]
fn new_params_keep_the_amount_in_range() {
    let mut c = Controller::new(ControllerParams::default(), secs(0));
    let tighter = ControllerParams {
        seconds_before_shedding: 6.0,
        ..ControllerParams::default()
    };
    c.set_params(tighter);
    assert!((c.amount() - tighter.resting()).abs() < EPS);
}
