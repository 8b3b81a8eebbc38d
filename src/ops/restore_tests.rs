use super::*;
use crate::ops::persist::{save, Overrides};
use serde_json::json;

/// A directory of its own for one test.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("brownout-restore-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// config.yaml's limiters with the controller's thresholds at 0.80 and 0.98.
fn base() -> LimitersConfig {
    let mut l = LimitersConfig::default();
    l.worker_utilization.end_of_good = 0.80;
    l.worker_utilization.start_of_bad = 0.98;
    l
}

fn keys(r: &Restored) -> Vec<&str> {
    r.report.dropped.iter().map(|d| d.key.as_str()).collect()
}

const NOW_MS: u64 = 1_800_000_000_000;

#[test]
fn a_file_that_holds_is_restored_whole_with_its_version() {
    let d = dir("whole");
    let path = d.join("overrides.json");
    let o = Overrides {
        kill_switch: true,
        version: 12,
        patch: Some(json!({"request_rate": {"rate": 44.0}})),
        reverts: vec![PendingRevert {
            limiter: "request_rate".into(),
            mode: crate::config::Mode::Enforce,
            at_unix_ms: 42,
        }],
    };
    save(&path, &o).unwrap();
    let r = restore(&base(), &path, NOW_MS);
    assert_eq!(keys(&r), Vec::<&str>::new());
    assert_eq!(r.report.set_aside, None);
    assert_eq!(
        (r.limiters.request_rate.rate, r.kill_switch, r.version),
        (44.0, true, 12)
    );
    assert_eq!(r.reverts, o.reverts);
    // No file at all: config.yaml, version 1 (or on from the version file).
    let r = restore(&base(), &d.join("none.json"), NOW_MS);
    assert_eq!((r.limiters, r.version), (base(), 1));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_override_config_yaml_no_longer_takes_is_dropped_by_name_and_the_rest_kept() {
    // The file saved start_of_bad 0.95 while config.yaml said end_of_good 0.80; config.yaml
    // now says 0.96: that one override no longer holds.
    let d = dir("neighbour");
    let path = d.join("overrides.json");
    let o = Overrides {
        kill_switch: true,
        version: 107,
        patch: Some(json!({
            "request_rate": {"rate": 44.0},
            "worker_utilization": {"start_of_bad": 0.95}
        })),
        reverts: Vec::new(),
    };
    save(&path, &o).unwrap();
    let mut now = base();
    now.worker_utilization.end_of_good = 0.96;
    let r = restore(&now, &path, NOW_MS);
    assert_eq!(keys(&r), ["limiters.worker_utilization.start_of_bad"]);
    assert!(
        r.report.dropped[0].reason.contains("start_of_bad"),
        "{:?}",
        r.report.dropped
    );
    assert_eq!(r.limiters.request_rate.rate, 44.0, "the rest is kept");
    assert_eq!(r.limiters.worker_utilization.start_of_bad, 0.98);
    assert!(r.kill_switch, "an engaged kill switch is never lost");
    assert_eq!(r.version, 108, "never a version issued before");
    // The file as it was, kept for the operator.
    let aside = r.report.set_aside.clone().unwrap();
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        std::fs::read(&path).unwrap()
    );
    assert!(aside.to_string_lossy().contains(".dropped-"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn unknown_members_and_bad_values_are_dropped_alone() {
    let d = dir("members");
    let path = d.join("overrides.json");
    std::fs::write(
        &path,
        json!({
            "kill_switch": true,
            "version": 5,
            "patch": {"request_rate": {"rate": -5.0, "burst": 77}},
            "reverts": [{"limiter": "nope", "mode": "enforce", "at_unix_ms": 1}],
            "surprise": 1
        })
        .to_string(),
    )
    .unwrap();
    let r = restore(&base(), &path, NOW_MS);
    let mut dropped = keys(&r);
    dropped.sort_unstable();
    assert_eq!(
        dropped,
        ["limiters.request_rate.rate", "reverts[0]", "surprise"]
    );
    assert_eq!(r.limiters.request_rate.burst, 77);
    assert_eq!(r.limiters.request_rate.rate, base().request_rate.rate);
    assert!(r.kill_switch);
    assert_eq!(r.version, 6);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn two_overrides_that_only_fail_together_are_both_dropped_each_naming_the_other() {
    let d = dir("together");
    let path = d.join("overrides.json");
    let o = Overrides {
        version: 3,
        patch: Some(json!({
            "worker_utilization": {"end_of_good": 0.9, "start_of_bad": 0.85},
            "request_rate": {"rate": 44.0}
        })),
        ..Overrides::default()
    };
    save(&path, &o).unwrap();
    let r = restore(&base(), &path, NOW_MS);
    let mut dropped = keys(&r);
    dropped.sort_unstable();
    assert_eq!(
        dropped,
        [
            "limiters.worker_utilization.end_of_good",
            "limiters.worker_utilization.start_of_bad"
        ]
    );
    for d in &r.report.dropped {
        assert!(d.reason.contains("both dropped"), "{d:?}");
    }
    assert_eq!(
        (
            r.limiters.worker_utilization.end_of_good,
            r.limiters.worker_utilization.start_of_bad,
            r.limiters.request_rate.rate
        ),
        (0.80, 0.98, 44.0)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_file_cut_short_is_moved_aside_keeping_its_kill_switch_and_version() {
    let d = dir("cut");
    let path = d.join("overrides.json");
    let o = Overrides {
        kill_switch: true,
        version: 107,
        patch: Some(json!({"request_rate": {"rate": 44.0}})),
        reverts: Vec::new(),
    };
    save(&path, &o).unwrap();
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
    let r = restore(&base(), &path, NOW_MS);
    assert_eq!(keys(&r), ["admin.overrides_file"]);
    assert!(r.kill_switch);
    assert_eq!(r.version, 108);
    assert_eq!(r.limiters, base());
    let aside = r.report.set_aside.clone().unwrap();
    assert_eq!(std::fs::read(&aside).unwrap(), &whole[..whole.len() / 2]);
    assert!(!path.exists(), "moved, so that no change overwrites it");
    // Lost with its version file too, and the version cut ("10" of "107"): the time stands in.
    std::fs::write(&path, br#"{"kill_switch": false, "version": 10"#).unwrap();
    std::fs::remove_file(persist::version_path(&path)).unwrap();
    let r = restore(&base(), &path, NOW_MS);
    assert_eq!(r.version, NOW_MS / 1000);
    assert!(!r.kill_switch);
    // A second set-aside never overwrites the first.
    std::fs::write(&path, b"{").unwrap();
    let again = restore(&base(), &path, NOW_MS);
    let second = again.report.set_aside.unwrap();
    assert_ne!(second, aside);
    assert_eq!(std::fs::read(&aside).unwrap(), &whole[..whole.len() / 2]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn salvage_reads_only_whole_values() {
    assert_eq!(
        salvage(b"{\n  \"kill_switch\": true,\n  \"version\": 107,\n  \"pat"),
        Salvaged {
            kill_switch: true,
            version: Some(107)
        }
    );
    assert_eq!(
        salvage(b"{\n  \"kill_switch\": false,\n  \"version\": 10"),
        Salvaged {
            kill_switch: false,
            version: None
        }
    );
}
