//! The metrics' rendering and publishing.

use super::*;

#[test]
fn renders_every_series_with_help() {
    let m = Metrics::new();
    m.request(Tier::Get, Outcome::Rejected);
    m.rejection(LimiterName::WorkerUtilization, Tier::Get, false);
    m.decision_time(std::time::Duration::from_micros(2));
    let text = m.render(&InFlight::default());
    for needle in [
        "# HELP brownout_requests_total",
        "brownout_requests_total{tier=\"get\",outcome=\"rejected\"} 1",
        "brownout_requests_total{tier=\"test\",outcome=\"allowed\"} 0",
        "brownout_rejections_total{limiter=\"worker_utilization\",tier=\"get\",mode=\"enforce\"} 1",
        "brownout_fail_open_total{limiter=\"worker_utilization\",reason=\"stale_plan\"} 0",
        "brownout_decision_duration_seconds_bucket",
        "brownout_in_flight_requests{tier=\"critical\"} 0",
        "brownout_build_info{version=",
        "# TYPE brownout_shed_probability gauge",
        "# TYPE brownout_decision_duration_seconds histogram",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}

#[test]
fn publishes_the_thresholds_in_force() {
    let m = Metrics::new();
    m.publish_thresholds(0.8, 0.95);
    m.publish_thresholds(0.85, 0.99);
    let text = m.render(&InFlight::default());
    for needle in [
        "# HELP brownout_utilization_threshold_ratio ",
        "brownout_utilization_threshold_ratio{threshold=\"end_of_good\"} 0.85",
        "brownout_utilization_threshold_ratio{threshold=\"start_of_bad\"} 0.99",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}

#[test]
fn every_metric_has_help_text() {
    let m = Metrics::new();
    m.publish_tracked_keys(LimiterName::RequestRate, 1);
    m.store_error(LimiterName::RequestRate);
    m.admin_change("patch");
    let text = m.render(&InFlight::default());
    let typed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(typed.contains(&"brownout_tracked_keys"), "{text}");
    for name in typed {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no HELP text"
        );
    }
}
