//! The lane in the model: while the controller sheds or reads an overload, critical requests
//! wait behind a short queue in the app.

use super::profile::built_in;
use super::tests::{demo, mixed};
use super::*;

/// While the controller sheds, the lower tiers are let into the app only up to the lane
/// (1.25 times the capacity; the limit held from the overload is about twice it): the rest
/// wait in the room, behind which critical requests do not queue. On two workers of 10 ms
/// and on 8 × 50 ms, critical p99 at 2C and 4C stays within twice its calm value (without
/// the lane, 2.2 to 2.4 times; docs/capacity.md), and nothing is lost to it.
#[test]
fn while_the_controller_sheds_critical_requests_wait_behind_a_short_queue() {
    for (workers, service_time, seed) in [(2, 0.01, 3), (8, 0.05, 5)] {
        let app = Scenario {
            workers,
            service_time,
            poisson: Some(seed),
            ..demo(Load::Phases(built_in("matrix").unwrap()))
        };
        let o = run(&LimitersConfig::default(), false, &app);
        let phase = |name: &str| o.phases.iter().find(|p| p.name == name).unwrap();
        let calm = phase("0.5C").p99[0].unwrap();
        for name in ["2C", "4C"] {
            let p = phase(name);
            let critical = p.p99[0].unwrap();
            assert!(
                critical <= 2.0 * calm,
                "{workers} workers, {name}: critical p99 {critical} against {calm} at 0.5C"
            );
            assert!(
                p.goodput > 0.9,
                "{workers} workers, {name}: goodput {}",
                p.goodput
            );
        }
    }
}

/// The mixed app's first overload: the limit, learned calm, lets in a queue several times the
/// capacity, and the controller's amount takes seconds to climb from its resting value to 0.
/// The lane is on from the controller's first sample that reads an overload, so critical
/// requests wait behind a short queue from then on, not only once it sheds. (Mean critical
/// p99 at 2C over four seeds: 2.51 times its 0.5C value with the lane on only while the
/// controller sheds, 2.20 with it; the whole phase, its first second's queue included.)
#[test]
fn from_the_first_sample_that_reads_an_overload_critical_requests_wait_behind_a_short_queue() {
    let ratios: Vec<f64> = (1..=4)
        .map(|seed| {
            let app = mixed(0.1, seed, Load::Phases(built_in("matrix").unwrap()));
            let o = run(&LimitersConfig::default(), false, &app);
            let p99 = |name: &str| {
                let p = o.phases.iter().find(|p| p.name == name).unwrap();
                p.p99[Tier::Critical.index()].unwrap()
            };
            p99("2C") / p99("0.5C")
        })
        .collect();
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    assert!(mean <= 2.35, "critical p99 at 2C over 0.5C: {ratios:?}");
}
