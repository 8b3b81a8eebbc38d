//! `brownout simulate` as an operator runs it: the binary, config.yaml, a quick profile, and
//! the files it writes.

mod common;

use common::Csv;
use std::path::PathBuf;
use std::process::{Command, Output};

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brownout"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("the binary runs")
}

/// A fresh folder for one test's output.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("brownout-simulate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_quick_scorecard_sheds_in_tier_order_and_never_critical() {
    let dir = scratch("scorecard");
    let out = simulate(&["--quick", "--out", dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| 2C | critical |"), "{stdout}");
    // config.yaml enforces the fast guard, which the model leaves out: the output says so.
    assert!(
        stdout.starts_with("Models worker_utilization's controller alone")
            && stdout.contains("This config enforces adaptive_concurrency (the fast guard)"),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(dir.join("simulate.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("drop probability by tier"));
    let csv = Csv::read(&dir.join("simulate.csv"));
    // The scorecard's 840 s, 20 times shorter.
    assert_eq!(csv.rows.len(), 42);
    assert!(csv.column("shed_critical").iter().all(|&s| s == 0.0));
    let first = |tier: &str| {
        csv.column(&format!("shed_{tier}"))
            .iter()
            .position(|&s| s > 0.0)
    };
    // Quick phases are too short for the controller to shed much; what it sheds is in order.
    if let Some(get) = first("get") {
        assert!(first("test").is_some_and(|test| test <= get));
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn settings_and_a_trace_drive_the_run() {
    let dir = scratch("trace");
    std::fs::create_dir_all(&dir).unwrap();
    // 10 s calm, then 100 s of every tier at 400 req/s (10 times the demo's capacity).
    let mut trace = String::from("critical,post,get,test\n");
    trace.push_str(&"4,8,20,8\n".repeat(10));
    trace.push_str(&"400,400,400,400\n".repeat(100));
    let file = dir.join("trace.csv");
    std::fs::write(&file, trace).unwrap();
    let out = simulate(&[
        "--trace",
        file.to_str().unwrap(),
        "--set",
        "limiters.worker_utilization.seconds_before_shedding=8",
        "--set",
        "limiters.worker_utilization.sample_interval=2s",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = Csv::read(&dir.join("simulate.csv"));
    assert_eq!(csv.rows.len(), 110);
    // With 8 s before shedding (and 2 s samples), test traffic is shed from about 18 s.
    let shed_test = csv.column("shed_test");
    let first = shed_test.iter().position(|&s| s > 0.0).unwrap();
    assert!((18..=20).contains(&first), "{first}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_bad_setting_is_refused_by_name_and_nothing_is_written() {
    let dir = scratch("bad");
    let out = simulate(&[
        "--set",
        "limiters.worker_utilization.start_of_bad=2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("limiters.worker_utilization.start_of_bad"),
        "{stderr}"
    );
    assert!(!dir.exists());
    for (args, says) in [
        (
            &["--profile", "nope"][..],
            "--profile \"nope\" is not one of step, ramp",
        ),
        (&["--mix", "0.5,0.5"][..], "--mix must be four shares"),
        (
            &["--trace", "/nonexistent/trace.csv"][..],
            "--trace /nonexistent/trace.csv",
        ),
    ] {
        let out = simulate(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
