//! `brownout bench overload --quick`: the scorecard runs each arm on a fresh demo process
//! and writes its files; it asserts only what a loaded machine cannot break (never timings,
//! never which request a busy second refused): nothing is shed with every limiter off (no
//! limiter runs), the overload is refused in part and critical requests are served with
//! adaptive_concurrency, and clients retry refused requests when asked to. How well the
//! defaults hold under overload is the model's to test (src/simulate/tests.rs) and the
//! benchmark's to measure (`bench overload --matrix`).

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{svg_texts, Csv};
use std::process::Command;

/// `brownout bench overload --quick ARGS --out OUT` from the repository's root (OUT emptied
/// first): its stdout, once it succeeded.
fn bench_overload(out: &std::path::Path, args: &[&str]) -> String {
    let _ = std::fs::remove_dir_all(out);
    let run = Command::new(env!("CARGO_BIN_EXE_brownout"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["bench", "overload", "--quick"])
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

#[test]
fn a_quick_scorecard_writes_every_arm_and_keeps_the_invariants() {
    let out = std::env::temp_dir().join(format!("brownout-scorecard-{}", std::process::id()));
    let stdout = bench_overload(&out, &["--arms", "off,adaptive", "--retries", "2"]);
    assert!(stdout.contains("| adaptive | 2C |"), "{stdout}");
    let doc = std::fs::read_to_string(out.join("scorecard.md")).unwrap();
    assert!(doc.contains("### off") && doc.contains("### adaptive"));
    assert!(doc.contains("up to 2 retries of a 429/503"), "{doc}");
    // Refused requests were retried: the retries column (9th) of some adaptive row is > 0.
    let adaptive_rows = doc.split("### adaptive").nth(1).unwrap();
    let retried: u64 = adaptive_rows
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| phase"))
        .filter_map(|l| l.split('|').nth(9)?.trim().parse::<u64>().ok())
        .sum();
    assert!(retried > 0, "{adaptive_rows}");
    // brownout's loops are drawn where they run, and nothing of them where they do not.
    for (arm, brownout) in [("off", false), ("adaptive", true)] {
        let svg = std::fs::read_to_string(out.join(format!("{arm}.svg"))).unwrap();
        assert!(svg.contains("successes per second by tier"));
        assert!(svg.contains("refusals per second, by who refused"), "{arm}");
        let amount =
            svg.contains("controller&apos;s amount") || svg.contains("controller's amount");
        assert_eq!(amount, brownout, "{arm}");
        // Every phase is named on the chart, and the legends name the tiers and limiters.
        let texts = svg_texts(&svg);
        for label in [
            "0.5C",
            "0.75C",
            "2C",
            "4C",
            "0.3C",
            "drop 1.5C",
            "restored 1.5C",
        ] {
            assert!(
                texts.iter().any(|t| t == label),
                "{arm}: no phase label {label}"
            );
        }
        assert!(
            texts.iter().any(|t| t == "critical"),
            "{arm}: no legend critical"
        );
        for label in ["adaptive_concurrency", "worker_utilization", "amount"] {
            assert_eq!(
                texts.iter().any(|t| t == label),
                brownout,
                "{arm}: the legend {label}"
            );
        }
    }

    let off = Csv::read(&out.join("off.csv"));
    for tier in ["critical", "post", "get", "test"] {
        let shed = off.column(&format!("shed_{tier}"));
        assert!(
            shed.iter().all(|&s| s == 0.0),
            "nothing sheds with every limiter off"
        );
    }

    let adaptive = Csv::read(&out.join("adaptive.csv"));
    let shed: f64 = ["post", "get", "test"]
        .iter()
        .flat_map(|t| adaptive.column(&format!("shed_{t}")))
        .sum();
    assert!(shed > 0.0, "the overload phases are refused in part");
    let ok: f64 = adaptive.column("ok_critical").iter().sum();
    assert!(ok > 0.0, "critical requests are served");
    // Every second, the limit adaptive_concurrency admitted under (from /v1/state; a second
    // it did not answer is NaN): overload shrank it from initial_limit (100), never below
    // min_limit.
    assert_eq!(
        adaptive.header.get(2).map(String::as_str),
        Some("adaptive_limit")
    );
    let limits: Vec<f64> = adaptive
        .column("adaptive_limit")
        .into_iter()
        .filter(|l| l.is_finite())
        .collect();
    assert!(
        limits.iter().any(|&l| l < 100.0) && limits.iter().all(|&l| l >= 1.0),
        "{limits:?}"
    );
    std::fs::remove_dir_all(out).unwrap();
}

/// An app as `--app` shapes it: GETs split over a cache hit, a read and a report, health
/// checks at a fixed rate (named critical by the bench, never refused), and a cold start:
/// every route is called, and the matrix row says what ran.
#[test]
fn an_app_of_three_get_routes_health_checks_and_a_cold_start_runs_as_one_matrix_row() {
    let out = std::env::temp_dir().join(format!("brownout-real-app-{}", std::process::id()));
    bench_overload(
        &out,
        &[
            "--arms",
            "config",
            "--settings",
            "defaults",
            "--app",
            "3xreal+health+cold~0.5",
        ],
    );
    let matrix = std::fs::read_to_string(out.join("matrix.md")).unwrap();
    let row = matrix
        .lines()
        .find(|l| l.starts_with("| 3xreal+health+cold~0.5 (config) |"))
        .unwrap_or_else(|| panic!("{matrix}"));
    // 3 workers over the mix's mean of 34.3 ms: 88 requests a second.
    assert!(row.contains("| 88/s |"), "{row}");
    assert!(
        row.contains("| cold ("),
        "the first phase is the cold start: {row}"
    );
    // Health checks: the last column but one, the share answered (critical, never shed; a
    // loaded machine may make one miss its deadline).
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    let health: f64 = cells[cells.len() - 3]
        .trim_end_matches('%')
        .parse()
        .unwrap();
    assert!(health > 50.0, "{row}");
    let doc = std::fs::read_to_string(out.join("3xreal-health-cold-0.5/scorecard.md")).unwrap();
    assert!(doc.contains("3 workers × 34.3 ms"), "{doc}");
    assert!(doc.contains("5 health checks a second"), "{doc}");
    assert!(
        doc.contains("a cold start: the first 3s 3× slower"),
        "{doc}"
    );
    // The bench's settings name the critical routes and the test-key prefix themselves.
    let config =
        std::fs::read_to_string(out.join("3xreal-health-cold-0.5/config.config.json")).unwrap();
    assert!(
        config.contains("GET /healthz") && config.contains("sk_test_"),
        "{config}"
    );
    assert!(config.contains("\"cold_start\": \"3s\""), "{config}");
    std::fs::remove_dir_all(out).unwrap();
}
