//! `brownout simulate` as an operator runs it: the binary, config.yaml, a quick profile, and
//! the files it writes.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{svg_texts, Csv};
use std::path::PathBuf;
use std::process::{Command, Output};

fn simulate(args: &[&str]) -> Output {
    simulate_with("config.yaml", args)
}

/// `brownout --config <config> simulate <args>`.
fn simulate_with(config: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brownout"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["--config", config, "simulate"])
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
    // config.yaml enforces the fast guard: the output says it is modelled, and what is not.
    assert!(
        stdout.starts_with("Models worker_utilization's controller")
            && stdout.contains("and adaptive_concurrency, the fast guard")
            && stdout
                .contains("request_rate, concurrent_requests and fleet_usage are not modelled"),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(dir.join("simulate.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("drop probability by tier"));
    // Phases are named on the chart; legends name the lines.
    let texts = svg_texts(&svg);
    for label in ["0.5C", "2C", "drop 1.5C", "demand", "p(test)", "limit"] {
        assert!(texts.iter().any(|t| t == label), "no {label} in the chart");
    }
    let csv = Csv::read(&dir.join("simulate.csv"));
    // The scorecard's 1,020 s, 20 times shorter.
    assert_eq!(csv.rows.len(), 51);
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
    // With 8 s before shedding (and 2 s samples), test traffic is shed from about 18 s, and
    // a stretch or two later (2 s each) here: the capacity is learned in the overload's
    // first seconds, and until then the controller reads nothing.
    let shed_test = csv.column("shed_test");
    let first = shed_test.iter().position(|&s| s > 0.0).unwrap();
    assert!((18..=24).contains(&first), "{first}");
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

#[test]
fn the_model_is_within_five_points_of_the_committed_full_run() {
    // docs/scorecard/hold/config.csv is a full `bench overload` run of the configuration
    // tuned for the demo's app (docs/tuned.yaml, which config.yaml was then; one row per
    // second of the scorecard, 1,020 s); simulate models the same config and profile.
    let dir = scratch("fidelity");
    // The demo's requests spend about 2 ms outside their worker (loopback, actix): its floor
    // reads about 52 ms.
    let tuned = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/tuned.yaml");
    let out = simulate_with(
        tuned,
        &["--overhead", "2ms", "--out", dir.to_str().unwrap()],
    );
    assert!(out.status.success());
    let model = Csv::read(&dir.join("simulate.csv"));
    let real = Csv::read(
        &PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .join("docs/scorecard/hold/config.csv"),
    );
    assert_eq!(model.rows.len(), real.rows.len(), "the same seconds");
    let capacity = 160.0;
    let sum = |c: &[f64], r: &std::ops::Range<usize>| c[r.clone()].iter().sum::<f64>();
    let tiers = ["critical", "post", "get", "test"];
    let (mut start, mut phases) = (0, 0);
    while start < model.rows.len() {
        let name = model.rows[start][1].clone();
        let end = (start..model.rows.len())
            .find(|&i| model.rows[i][1] != name)
            .unwrap_or(model.rows.len());
        let r = start..end;
        let seconds = (end - start) as f64;
        let model_ok: f64 = tiers
            .iter()
            .map(|t| sum(&model.column(&format!("succeeded_{t}")), &r))
            .sum();
        let real_ok: f64 = tiers
            .iter()
            .map(|t| sum(&real.column(&format!("ok_{t}")), &r))
            .sum();
        let (model_goodput, real_goodput) =
            (model_ok / seconds / capacity, real_ok / seconds / capacity);
        assert!(
            (model_goodput - real_goodput).abs() <= 0.05,
            "{name}: goodput modelled {model_goodput:.3}, measured {real_goodput:.3}"
        );
        let model_critical = (sum(&model.column("succeeded_critical"), &r)
            / sum(&model.column("offered_critical"), &r))
        .min(1.0);
        let real_offered = ["ok", "shed", "timeouts"]
            .iter()
            .map(|what| sum(&real.column(&format!("{what}_critical")), &r))
            .sum::<f64>();
        let real_critical = sum(&real.column("ok_critical"), &r) / real_offered;
        assert!(
            (model_critical - real_critical).abs() <= 0.05,
            "{name}: critical success modelled {model_critical:.3}, measured {real_critical:.3}"
        );
        start = end;
        phases += 1;
    }
    assert_eq!(phases, 7);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_reader_that_stops_early_ends_the_output_not_the_run() {
    // As `brownout simulate … | head -3`: the pipe is closed before anything is printed.
    let dir = scratch("closed");
    let mut child = Command::new(env!("CARGO_BIN_EXE_brownout"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["--config", "config.yaml", "simulate", "--quick", "--out"])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("it ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(dir.join("simulate.csv").is_file() && dir.join("simulate.svg").is_file());
}
