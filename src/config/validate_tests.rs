//! The validation's tests: every refusal names its key.

use super::*;
use crate::config::refused;

#[test]
fn a_range_error_says_on_which_line_the_key_is() {
    let e = refused(
        "# thresholds\nlimiters:\n  worker_utilization:\n    mode: dark\n    start_of_bad: 1.5\n",
    );
    assert!(
        e.starts_with("limiters.worker_utilization.start_of_bad must be")
            && e.ends_with("(line 5)"),
        "{e}"
    );
    // A key left at its default is not in the file: no line.
    let e = refused("limiters:\n  worker_utilization:\n    end_of_good: 0.98\n");
    assert!(!e.contains("(line"), "{e}");
}

#[test]
fn defaults_are_valid() {
    Config::default().validate().unwrap();
    Config::from_yaml_str("{}").unwrap();
}

#[test]
fn unknown_keys_are_errors() {
    let e = refused("limiters:\n  worker_utilization:\n    start_of_badd: 0.8\n");
    assert!(e.contains("start_of_badd"), "{e}");
    let e = refused("nonsense: 1\n");
    assert!(e.contains("nonsense"), "{e}");
}

#[test]
fn bad_duration_is_an_error() {
    let e = refused("limiters:\n  worker_utilization:\n    sample_interval: 8\n");
    assert!(e.contains("duration"), "{e}");
    let e = refused("limiters:\n  worker_utilization:\n    sample_interval: 8 fortnights\n");
    assert!(e.contains("not a duration"), "{e}");
}

#[test]
#[cfg(not(feature = "redis"))]
fn without_the_redis_feature_a_redis_store_is_refused_by_name() {
    let e = refused("store:\n  kind: redis\n  url: redis://127.0.0.1:6379/\n");
    assert!(
        e.starts_with("store.kind is redis, which needs brownout's `redis` feature: add features = [\"redis\"]"),
        "{e}"
    );
    assert!(e.ends_with("(line 2)"), "{e}");
}

#[test]
fn bad_route_and_address_name_the_key() {
    let e = refused("classifier:\n  critical: [\"charges\"]\n");
    assert!(e.starts_with("classifier.critical[0]"), "{e}");
    let e = refused("admin:\n  bind: localhost\n");
    assert!(e.starts_with("admin.bind"), "{e}");
}

#[test]
#[cfg(feature = "redis")]
fn redis_store_settings_are_checked() {
    let ok = "store:\n  kind: redis\n  url: redis://127.0.0.1:6379/\n";
    Config::from_yaml_str(ok).unwrap().validate().unwrap();
    let e = refused("store:\n  kind: redis\n");
    assert!(e.starts_with("store.url or store.nodes"), "{e}");
    let cluster = "store:\n  kind: redis\n  nodes: [\"redis://127.0.0.1:7000\"]\n";
    Config::from_yaml_str(cluster).unwrap();
    let e = refused("store:\n  kind: redis\n  url: rediss://127.0.0.1/\n");
    assert!(e.starts_with("store.url must be a redis://"), "{e}");
    let e = refused("store:\n  kind: redis\n  nodes: [\"127.0.0.1:7000\"]\n");
    assert!(e.starts_with("store.nodes must be a redis://"), "{e}");
    let both = "store:\n  kind: redis\n  url: redis://a/\n  nodes: [\"redis://b\"]\n";
    assert!(refused(both).starts_with("store.url or store.nodes"));
    let e = refused("store:\n  timeout: 2s\n");
    assert!(e.starts_with("store.timeout"), "{e}");
    let e = refused("store:\n  permit_ttl: 0s\n");
    assert!(e.starts_with("store.permit_ttl"), "{e}");
}

#[test]
#[cfg(feature = "redis")]
fn the_admin_scope_follows_the_store_and_is_refused_by_name() {
    let memory = Config::from_yaml_str("{}").unwrap();
    assert_eq!(memory.admin_scope(), crate::config::AdminScope::Local);
    let redis =
        Config::from_yaml_str("store:\n  kind: redis\n  url: redis://127.0.0.1:6379/\n").unwrap();
    assert_eq!(redis.admin_scope(), crate::config::AdminScope::Fleet);
    let e = refused("admin:\n  scope: fleet\n");
    assert!(e.starts_with("admin.scope"), "{e}");
    let e = refused("admin:\n  instance: \"\"\n");
    assert!(e.starts_with("admin.instance"), "{e}");
    let e = refused("store:\n  sync: local_first\n");
    assert!(e.starts_with("store.sync"), "{e}");
    let e = refused("store:\n  sync_interval: 1ms\n");
    assert!(e.starts_with("store.sync_interval"), "{e}");
    let e = refused("admin:\n  scope: everywhere\n");
    assert!(e.contains("admin.scope"), "{e}");
}

mod shipped {
    use super::*;

    #[test]
    fn the_shipped_config_yaml_is_valid_and_documents_the_defaults() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config.yaml");
        // The library's settings only: an app that embeds brownout loads it as it is (the
        // demo's own section is in demo.yaml, and a `demo:` here would be refused as a typo).
        let c = Config::load(path).unwrap();
        let e = Config::from_yaml_str("demo:\n  workers: 8\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("demo is not a known key"), "{e}");
        let d = Config::default();
        // The code's thresholds hold the work let past just below the learned capacity; the
        // shipped file runs on them (a file that tuned its own would say so on each line
        // with the default beside it).
        let wu = &d.limiters.worker_utilization;
        assert_eq!((wu.end_of_good, wu.start_of_bad), (0.9, 0.97));
        assert_eq!(wu.capacity, None, "learned");
        assert_eq!(wu.sample_interval.get(), std::time::Duration::from_secs(8));
        let text = std::fs::read_to_string(path).unwrap();
        let shipped = &c.limiters.worker_utilization;
        for (key, value, default) in [
            ("end_of_good", shipped.end_of_good.to_string(), "0.9"),
            ("start_of_bad", shipped.start_of_bad.to_string(), "0.97"),
            ("sample_interval", shipped.sample_interval.to_string(), "8s"),
        ] {
            let line = format!("    {key}: {value}");
            let note = format!("# demo (default {default})");
            let documented = text
                .lines()
                .any(|l| l.starts_with(&line) && (value == default || l.ends_with(&note)));
            assert!(
                documented,
                "config.yaml: {key} is {value} without a `# demo (default {default})` note"
            );
        }
        assert_eq!(c.admin, d.admin);
        // The demo's critical route and test keys are marked `# demo`: the library names
        // neither route nor key prefix of its own.
        assert_eq!(
            (d.classifier.critical.len(), &d.classifier.test_key_prefix),
            (0, &None)
        );
        let demo_classifier = crate::config::ClassifierConfig {
            critical: vec!["POST /v1/charges".into()],
            test_key_prefix: Some("sk_test_".into()),
            ..d.classifier.clone()
        };
        assert_eq!(c.classifier, demo_classifier);
    }
}
