//! No setting the validator accepts can break the controller: over random accepted settings,
//! random readings and random clocks (extreme floats included), the amount and every drop
//! probability stay finite and in range, and going back to the shipped settings brings the
//! controller back to rest.

use super::WorkerUtilizationConfig;
use crate::control::Controller;
use crate::schema::HumanDuration;
use crate::tier::Tier;
use proptest::prelude::*;
use std::time::Duration;

/// The floats an operator or a broken gauge can produce: denormals, the largest ones,
/// infinities, NaN, signed zeros, values just off 0 and 1.
const EXTREME: [f64; 19] = [
    0.0,
    -0.0,
    5e-324,
    1e-320,
    1e-308,
    2e-290,
    8e-270,
    1e-17,
    1.0 - 1e-16,
    1.0,
    1.0 + 1e-16,
    -1.0,
    1e300,
    1.79e308,
    f64::MAX,
    f64::MIN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
];

/// Mostly an ordinary value of `range`, sometimes an extreme one.
fn float(range: std::ops::Range<f64>) -> impl Strategy<Value = f64> {
    prop_oneof![4 => range, 1 => prop::sample::select(EXTREME.to_vec())]
}

/// Settings of the worker-utilization block, drawn near and across the edges of every range.
fn settings() -> impl Strategy<Value = WorkerUtilizationConfig> {
    let thresholds = (float(0.0..1.0), float(0.0..0.5));
    let times = (
        float(0.0..200.0),
        float(0.0..600.0),
        prop::sample::select(vec![1u64, 100, 2_000, 8_000, 300_000]),
    );
    let bands = (float(0.0..1.0), float(0.0..1.0), any::<bool>(), float(0.0..1.0), float(0.0..1.0));
    let caps = prop::array::uniform4(float(0.0..1.0));
    (thresholds, times, bands, caps).prop_map(
        |((good, gap), (before, all, interval), (a, b, critical, c, d), caps)| {
            let mut w = WorkerUtilizationConfig {
                end_of_good: good,
                start_of_bad: good + gap,
                seconds_before_shedding: before,
                seconds_to_shed_all: all,
                sample_interval: HumanDuration::from_millis(interval),
                ..WorkerUtilizationConfig::default()
            };
            let (a, b) = if a <= b { (a, b) } else { (b, a) };
            w.bands.test = [0.0, a];
            w.bands.get = [a, b];
            w.bands.post = [b, 1.0];
            w.shed_critical = critical;
            w.bands.critical = critical.then_some([c.min(d), c.max(d)]);
            w.max_shed.critical = caps[0];
            w.max_shed.post = caps[1];
            w.max_shed.get = caps[2];
            w.max_shed.test = caps[3];
            w
        },
    )
}

/// Readings and the clock times they are taken at, in µs (not sorted: the clock may go back,
/// stall or jump a day).
fn samples() -> impl Strategy<Value = Vec<(f64, u64)>> {
    prop::collection::vec((float(0.0..2.0), 0u64..100_000_000_000), 1..40)
}

/// The amount is finite and within `[resting, 1]`, and every tier's drop probability within
/// `[0, 1]`.
fn in_range(c: &Controller, w: &WorkerUtilizationConfig) -> Result<(), TestCaseError> {
    let amount = c.amount();
    let resting = w.controller().resting();
    prop_assert!(
        amount.is_finite() && resting <= amount && amount <= 1.0,
        "amount {amount} outside [{resting}, 1]"
    );
    let p = w.probabilities(amount);
    for tier in Tier::ALL {
        let p = p.get(tier);
        prop_assert!(p.is_finite() && (0.0..=1.0).contains(&p), "{tier} {p}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, max_global_rejects: 1_000_000, ..ProptestConfig::default() })]

    #[test]
    fn no_accepted_setting_breaks_the_controller_and_the_shipped_ones_bring_it_back(
        first in settings(),
        second in settings(),
        readings in samples(),
        more in samples(),
    ) {
        prop_assume!(first.validate().is_ok());
        let mut c = Controller::new(first.controller(), Duration::ZERO);
        in_range(&c, &first)?;
        for (u, at) in &readings {
            c.update(*u, Duration::from_micros(*at));
            in_range(&c, &first)?;
        }
        // A live change to other accepted settings (a PATCH).
        if second.validate().is_ok() {
            c.set_params(second.controller());
            in_range(&c, &second)?;
            for (u, at) in &more {
                c.update(*u, Duration::from_micros(*at));
                in_range(&c, &second)?;
            }
        }
        // Back to the shipped settings: idle samples, 8 s apart, bring it to rest within
        // (1 - resting) × seconds_to_shed_all, and nothing is shed.
        let shipped = WorkerUtilizationConfig::default();
        c.set_params(shipped.controller());
        in_range(&c, &shipped)?;
        let start = readings.iter().chain(&more).map(|(_, at)| *at).max().unwrap_or(0);
        let mut now = Duration::from_micros(start);
        for _ in 0..25 {
            now += shipped.sample_interval.get();
            c.update(0.0, now);
            in_range(&c, &shipped)?;
        }
        prop_assert_eq!(c.amount(), shipped.controller().resting());
        let p = shipped.probabilities(c.amount());
        prop_assert!(Tier::ALL.iter().all(|&t| p.get(t) == 0.0), "{p:?}");
    }
}

#[test]
fn a_reading_that_is_not_a_number_puts_the_controller_at_rest_and_says_so() {
    let w = WorkerUtilizationConfig::default();
    let mut c = Controller::new(w.controller(), Duration::ZERO);
    for i in 1..=20 {
        c.update(1.0, Duration::from_secs(8 * i));
    }
    assert!(c.amount() > 0.0 && !c.faulted());
    c.update(f64::NAN, Duration::from_secs(168));
    assert!(c.faulted());
    assert_eq!(c.amount(), w.controller().resting());
    c.update(1.0, Duration::from_secs(176));
    assert!(!c.faulted());
    assert!(c.amount().is_finite());
}

#[test]
fn the_values_the_issue_found_are_refused_by_name() {
    let patch = |f: &dyn Fn(&mut WorkerUtilizationConfig)| {
        let mut w = WorkerUtilizationConfig::default();
        f(&mut w);
        w.validate().map_err(|e| e.to_string())
    };
    let key = |r: Result<(), String>| r.unwrap_err();
    let k = "limiters.worker_utilization.";
    for (bad, name) in [
        (patch(&|w| w.seconds_to_shed_all = 1e-320), "seconds_to_shed_all"),
        (patch(&|w| w.seconds_to_shed_all = 1.79e308), "seconds_to_shed_all"),
        (patch(&|w| w.seconds_before_shedding = 0.0), "seconds_before_shedding"),
        (patch(&|w| w.max_shed.get = 5e-324), "max_shed.get"),
        (patch(&|w| w.end_of_good = 1e-320), "end_of_good"),
        (patch(&|w| w.bands.test = [0.0, 5e-324]), "bands.test"),
        (patch(&|w| w.retry_after = Some(HumanDuration(Duration::MAX))), "retry_after"),
    ] {
        let e = key(bad);
        assert!(e.starts_with(&format!("{k}{name} must")), "{e}");
    }
}
