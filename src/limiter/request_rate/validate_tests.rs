//! Tests of `limiter/request_rate/validate.rs`.

use crate::config::{refused, Config};

#[test]
fn rate_must_be_positive_and_costs_within_burst() {
    let e = refused("limiters:\n  request_rate:\n    rate: 0\n");
    assert!(
        e.starts_with("limiters.request_rate.rate must be greater than 0"),
        "{e}"
    );
    let e = refused(
        "limiters:\n  request_rate:\n    burst: 10\n    costs:\n      \"POST /v1/x\": 20\n",
    );
    assert!(
        e.starts_with("limiters.request_rate.costs[\"POST /v1/x\"] is 20"),
        "{e}"
    );
    let e = refused("limiters:\n  request_rate:\n    costs:\n      \"nonsense\": 2\n");
    assert!(
        e.starts_with("limiters.request_rate.costs[\"nonsense\"]"),
        "{e}"
    );
}

#[test]
fn refill_time_and_table_size_are_bounded() {
    let e = refused("limiters:\n  request_rate:\n    rate: 0.001\n    burst: 1000000\n");
    assert!(
        e.starts_with("limiters.request_rate.burst refills in"),
        "{e}"
    );
    let e = refused("limiters:\n  request_rate:\n    plans:\n      slow:\n        rate: 0.0001\n        burst: 10000\n");
    assert!(
        e.starts_with("limiters.request_rate.plans.slow.burst"),
        "{e}"
    );
    let e = refused("limiters:\n  request_rate:\n    max_keys: 1_000_000_000\n");
    assert!(
        e.starts_with("limiters.request_rate.max_keys must be between 8 and 100000000"),
        "{e}"
    );
}

#[test]
fn plans_are_checked_against_their_own_burst() {
    let e = refused("limiters:\n  request_rate:\n    costs:\n      \"POST /v1/x\": 20\n    plans:\n      free:\n        rate: 1\n        burst: 5\n");
    assert!(
        e.starts_with("limiters.request_rate.plans.free.costs"),
        "{e}"
    );
    let e = refused("limiters:\n  request_rate:\n    plans:\n      \"bad name\":\n        rate: 1\n        burst: 5\n");
    assert!(
        e.starts_with("limiters.request_rate.plans.bad name must be"),
        "{e}"
    );
}

#[test]
fn quotas_are_checked() {
    let e = refused("limiters:\n  request_rate:\n    quotas:\n      - {name: a, algorithm: fixed_window, limit: 0, window: 1d}\n");
    assert!(
        e.starts_with("limiters.request_rate.quotas[0].limit"),
        "{e}"
    );
    let e = refused("limiters:\n  request_rate:\n    quotas:\n      - {name: a, algorithm: fixed_window, limit: 3, window: 1d}\n      - {name: a, algorithm: sliding_window, limit: 3, window: 1d}\n");
    assert!(e.starts_with("limiters.request_rate.quotas[1].name"), "{e}");
    let e = refused("limiters:\n  request_rate:\n    quotas:\n      - {name: a, algorithm: leaky, limit: 3, window: 1d}\n");
    assert!(e.contains("leaky"), "{e}");
}

#[test]
fn underscored_numbers_parse() {
    let c =
        Config::from_yaml_str("limiters:\n  request_rate:\n    max_keys: 1_000_000\n").unwrap();
    assert_eq!(c.limiters.request_rate.max_keys, 1_000_000);
}

#[test]
fn a_sliding_log_is_bounded_and_names_the_cheaper_choice() {
    let yaml = |limit: u32| {
        format!("limiters:\n  request_rate:\n    quotas:\n      - {{name: q, algorithm: sliding_log, limit: {limit}, window: 1h}}\n")
    };
    let e = refused(&yaml(1_001));
    assert!(
        e.starts_with("limiters.request_rate.quotas[0].limit is 1001 for a sliding_log"),
        "{e}"
    );
    assert!(e.contains("use algorithm: sliding_window"), "{e}");
    let config = Config::from_yaml_str(&yaml(1_000)).expect("1000 is allowed");
    assert_eq!(config.limiters.request_rate.quotas[0].limit, 1_000);
}
