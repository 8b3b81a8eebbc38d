//! Reload of the config file on SIGHUP (its own test binary: the signal is process-wide).
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant};

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn hangup() {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[actix_web::test]
async fn sighup_reloads_a_valid_file_and_keeps_running_on_an_invalid_one() {
    let dir = std::env::temp_dir().join(format!("brownout-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    let yaml = |eog: f64| {
        format!("limiters:\n  worker_utilization:\n    source: custom\n    sample_interval: 5m\n    end_of_good: {eog}\n")
    };
    std::fs::write(&path, yaml(0.7)).unwrap();
    let config = brownout::Config::load(&path).unwrap();
    let rig = common::Rig::with(config, |b| b.config_file(&path));

    std::fs::write(&path, yaml(0.5)).unwrap();
    hangup();
    wait_until("the reload", || {
        rig.brownout
            .settings()
            .limiters
            .worker_utilization
            .end_of_good
            == 0.5
    })
    .await;
    let audit = rig.brownout.audit();
    assert_eq!(
        (audit[0].action, audit[0].source.as_str()),
        ("reload", "signal")
    );

    // An invalid file changes nothing.
    std::fs::write(
        &path,
        "limiters:\n  worker_utilization:\n    start_of_bad: 0.1\n",
    )
    .unwrap();
    hangup();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        rig.brownout
            .settings()
            .limiters
            .worker_utilization
            .end_of_good,
        0.5
    );
    assert_eq!(rig.brownout.settings().version, 2);

    // A reload applies every section that can change live: the classifier and metrics_auth.
    let live = "admin:\n  metrics_auth: true\nclassifier:\n  critical: [\"POST /v1/refunds\"]\n  trust_forwarded_for: true\n  forwarded_for_hops: 2\n  test_key_prefix: tk_\nlimiters:\n  worker_utilization:\n    source: custom\n    sample_interval: 5m\n    end_of_good: 0.5\n";
    std::fs::write(&path, live).unwrap();
    hangup();
    wait_until("the classifier reload", || {
        rig.brownout
            .settings()
            .classifier
            .config()
            .trust_forwarded_for
    })
    .await;
    let s = rig.brownout.settings();
    let classifier = s.classifier.config();
    assert_eq!(classifier.critical, ["POST /v1/refunds"]);
    assert_eq!(
        (
            classifier.forwarded_for_hops,
            classifier.test_key_prefix.as_deref()
        ),
        (2, Some("tk_"))
    );
    assert!(s.metrics_auth);
    assert_eq!(s.version, 3);

    // A section read only at start refuses the reload by name, and nothing changes.
    std::fs::write(&path, format!("{live}store:\n  timeout: 9ms\n")).unwrap();
    let e = rig.brownout.reload_config().await.unwrap_err().to_string();
    assert_eq!(
        e,
        "store.timeout cannot change on a reload (it is read at start); restart to change it, or put the running value back"
    );
    std::fs::write(
        &path,
        live.replace(
            "metrics_auth: true",
            "metrics_auth: true\n  bind: 127.0.0.1:9999",
        ),
    )
    .unwrap();
    hangup();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = rig.brownout.reload_config().await.unwrap_err().to_string();
    assert!(e.starts_with("admin.bind cannot change on a reload"), "{e}");
    assert_eq!(rig.brownout.settings().version, 3, "nothing changed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file that also holds the embedding program's own section (as config.yaml holds the demo's
/// `demo:`): a reload reads it with that section again, applies brownout's changes, and refuses
/// a change to the program's section by its key (the program read it at start).
#[actix_web::test]
async fn a_reload_keeps_the_programs_own_section_as_it_was_read_at_start() {
    let dir = std::env::temp_dir().join(format!("brownout-reload-app-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    // No SIGHUP listener: the other test of this binary sends the process SIGHUPs.
    let yaml = |workers: u32, rate: u32| {
        format!("shop:\n  workers: {workers}\nadmin:\n  reload_on_sighup: false\nlimiters:\n  request_rate:\n    rate: {rate}\n")
    };
    std::fs::write(&path, yaml(4, 10)).unwrap();
    let config = brownout::Config::load_with_sections(&path, &["shop"]).unwrap();
    let rig = common::Rig::with(config, |b| b.config_file(&path));

    std::fs::write(&path, yaml(4, 20)).unwrap();
    let applied = rig.brownout.reload_config().await.unwrap();
    assert_eq!(rig.brownout.settings().version, applied.version);
    assert_eq!(rig.brownout.settings().limiters.request_rate.rate, 20.0);

    std::fs::write(&path, yaml(5, 30)).unwrap();
    let e = rig.brownout.reload_config().await.unwrap_err().to_string();
    assert!(
        e.starts_with("shop.workers cannot change on a reload (it is read at start)"),
        "{e}"
    );
    assert_eq!(rig.brownout.settings().limiters.request_rate.rate, 20.0);
    std::fs::remove_dir_all(&dir).unwrap();
}
