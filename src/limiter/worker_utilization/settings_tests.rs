//! Tests of `limiter/worker_utilization/settings.rs`.

use crate::config::refused;

#[test]
fn bad_threshold_order_names_the_key() {
    let e =
        refused("limiters:\n  worker_utilization:\n    end_of_good: 0.9\n    start_of_bad: 0.8\n");
    assert!(
        e.starts_with("limiters.worker_utilization.start_of_bad must be greater than end_of_good"),
        "{e}"
    );
}

#[test]
fn bands_must_cover_zero_to_one_in_order() {
    let e = refused("limiters:\n  worker_utilization:\n    bands:\n      test: [0.0, 0.5]\n      get: [0.4, 0.7]\n      post: [0.7, 1.0]\n");
    assert!(
        e.starts_with("limiters.worker_utilization.bands.get"),
        "{e}"
    );
    let e = refused("limiters:\n  worker_utilization:\n    bands:\n      test: [0.0, 0.3]\n      get: [0.3, 0.6]\n      post: [0.6, 0.9]\n");
    assert!(
        e.starts_with("limiters.worker_utilization.bands.post must end at 1"),
        "{e}"
    );
}

#[test]
fn shed_critical_needs_a_band() {
    let e = refused("limiters:\n  worker_utilization:\n    shed_critical: true\n");
    assert!(
        e.starts_with("limiters.worker_utilization.bands.critical is required"),
        "{e}"
    );
}

#[test]
#[cfg(not(feature = "cpu"))]
fn without_the_cpu_feature_the_cpu_source_is_refused_by_name() {
    let e = refused("limiters:\n  worker_utilization:\n    source: cpu\n");
    assert!(
        e.starts_with("limiters.worker_utilization.source is cpu, which needs brownout's `cpu` feature: add features = [\"cpu\"]"),
        "{e}"
    );
    let e = refused(
        "limiters:\n  worker_utilization:\n    source: max\n    sources: [in_flight, cpu]\n",
    );
    assert!(
        e.starts_with("limiters.worker_utilization.sources lists cpu, which needs"),
        "{e}"
    );
}

#[test]
#[cfg(feature = "cpu")]
fn with_the_cpu_feature_the_cpu_source_is_accepted() {
    let yaml = "limiters:\n  worker_utilization:\n    source: max\n    sources: [in_flight, cpu]\n";
    crate::config::Config::from_yaml_str(yaml).unwrap();
}

#[test]
fn max_source_needs_a_list_and_ratios_are_bounded() {
    let e = refused("limiters:\n  worker_utilization:\n    source: max\n");
    assert!(e.starts_with("limiters.worker_utilization.sources"), "{e}");
    let e = refused("limiters:\n  worker_utilization:\n    max_shed:\n      get: 1.5\n");
    assert!(
        e.starts_with("limiters.worker_utilization.max_shed.get"),
        "{e}"
    );
}
