//! Tests of `builder.rs`.
use super::*;

#[test]
fn a_route_cost_without_a_rate_limit_is_refused_in_one_sentence() {
    let e = Config::builder()
        .route_cost("POST /v1/charges", 5)
        .build()
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "limiters.request_rate.costs would have no effect: request_rate is off; call rate_limit(per_second, burst) too"
    );
    let both = Config::builder()
        .route_cost("POST /v1/charges", 5)
        .rate_limit(1.0, 10);
    assert!(both.build().is_ok(), "in either order");
}

#[test]
fn a_per_ip_ceiling_without_a_rate_limit_is_refused_and_with_one_it_replaces_the_auto_one() {
    let e = Config::builder()
        .per_ip(2.0, 5)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("limiters.request_rate.per_ip would have no effect"),
        "{e}"
    );
    let rr = |b: ConfigBuilder| b.build().unwrap().limiters.request_rate;
    let auto = rr(Config::builder().rate_limit(20.0, 100));
    assert_eq!(
        auto.ceiling(),
        Some(super::super::PerIpConfig::new(200.0, 1_000))
    );
    let set = rr(Config::builder().per_ip(2.0, 5).rate_limit(20.0, 100));
    assert_eq!(set.ceiling(), Some(super::super::PerIpConfig::new(2.0, 5)));
    let off = rr(Config::builder().rate_limit(20.0, 100).no_per_ip());
    assert_eq!(off.ceiling(), None);
    assert!(
        Config::builder().no_per_ip().build().is_ok(),
        "off is never in the way"
    );
}

#[test]
fn the_builder_says_what_the_file_says() {
    let yaml = "limiters:\n  request_rate:\n    mode: enforce\n    rate: 20\n    burst: 100\n    costs: { \"POST /v1/charges\": 5 }\n  concurrent_requests:\n    mode: enforce\n    max_in_flight: 10\n  fleet_usage:\n    mode: enforce\n    capacity: 100\n    reserved_for_critical: 0.2\n  adaptive_concurrency:\n    mode: enforce\n  worker_utilization:\n    capacity: 16\nclassifier:\n  critical: [\"POST /v1/charges\", \"POST /v1/payouts\"]\n";
    let built = Config::builder()
        .rate_limit(20.0, 100)
        .route_cost("POST /v1/charges", 5)
        .concurrent_requests(10)
        .reserve_for_critical(100, 0.2)
        .fast_guard()
        .capacity(16)
        .critical_route("POST /v1/charges")
        .critical_route("POST /v1/payouts")
        .build()
        .unwrap();
    assert_eq!(built, Config::from_yaml_str(yaml).unwrap());
}

#[test]
fn a_mistake_is_refused_with_the_files_message() {
    let cases: [(ConfigBuilder, &str); 4] = [
        (
            Config::builder().rate_limit(f64::NAN, 1),
            "limiters:\n  request_rate:\n    mode: enforce\n    rate: .nan\n    burst: 1\n",
        ),
        (
            Config::builder().concurrent_requests(0),
            "limiters:\n  concurrent_requests:\n    mode: enforce\n    max_in_flight: 0\n",
        ),
        (
            Config::builder().reserve_for_critical(10, 1.5),
            "limiters:\n  fleet_usage:\n    mode: enforce\n    capacity: 10\n    reserved_for_critical: 1.5\n",
        ),
        (
            Config::builder().critical_route("nope"),
            "classifier:\n  critical: [nope]\n",
        ),
    ];
    for (builder, yaml) in cases {
        let from_code = builder.build().unwrap_err().to_string();
        let from_file = Config::from_yaml_str(yaml).unwrap_err().to_string();
        // The file's message may add where the key is; the rest is the same.
        let without_line = |m: &str| m.split(" (line").next().unwrap().to_owned();
        assert_eq!(without_line(&from_code), without_line(&from_file));
        assert!(from_code.starts_with("limiters.") || from_code.starts_with("classifier."));
    }
}
