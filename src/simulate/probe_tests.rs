//! The floor probe in the model: a probe's few fast requests of a slow route do not pull the
//! mixed app's floors, and with them its capacity, under what the app serves.

use super::profile::built_in;
use super::tests::mixed;
use super::*;

/// The mixed app (10 ms GETs, 100 ms POSTs, 20 ms charges, times spread log-normally), seed
/// 12: a minute into 2C a probe for drift measured the POSTs at 44 ms on the three that
/// finished in its window, the capacity was read back at those floors (4.8 requests at once
/// to 2.8), the lane shrank with it and left workers idle, and every later stretch, slow
/// against the low floors, taught a lower capacity: 2C goodput 52.5%, 4C 67.1% (the other
/// eleven seeds 89–97%). A probe for drift now lowers confirmed floors by at most
/// `FLOOR_DRIFT`: 94.7% and 89.4%.
#[test]
fn a_probe_for_drift_does_not_pull_the_capacity_under_the_workers() {
    let app = mixed(0.1, 12, Load::Phases(built_in("matrix").unwrap()));
    let o = run(&LimitersConfig::default(), false, &app);
    let phase = |name: &str| o.phases.iter().find(|p| p.name == name).unwrap();
    assert!(phase("2C").goodput > 0.9, "2C: {}", phase("2C").goodput);
    assert!(phase("4C").goodput > 0.85, "4C: {}", phase("4C").goodput);
}
