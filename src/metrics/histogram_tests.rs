//! Tests of `metrics/histogram.rs`.

use super::*;

#[test]
fn buckets_are_cumulative_and_bounds_inclusive() {
    static BOUNDS: [f64; 3] = [0.001, 0.01, 0.1];
    let h = AtomicHistogram::new(&BOUNDS);
    for ns in [500_000, 1_000_000, 5_000_000, 500_000_000] {
        h.record_nanos(ns);
    }
    let mut out = String::new();
    h.render("x_seconds", "help", &mut out);
    assert!(out.contains("# TYPE x_seconds histogram"));
    assert!(out.contains("x_seconds_bucket{le=\"0.001\"} 2\n"), "{out}");
    assert!(out.contains("x_seconds_bucket{le=\"0.01\"} 3\n"));
    assert!(out.contains("x_seconds_bucket{le=\"0.1\"} 3\n"));
    assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"));
    assert!(out.contains("x_seconds_count 4\n"));
    let sum: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("x_seconds_sum "))
        .unwrap()
        .parse()
        .unwrap();
    assert!((sum - 0.5065).abs() < 1e-9);
}
