//! Reload of the config file on SIGHUP (its own test binary: the signal is process-wide).

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
    std::fs::remove_dir_all(&dir).unwrap();
}
