//! The dashboards against a real Prometheus (Debian's package; `.ci/run` installs it): scrape
//! the demo on loopback while a bounded load runs, then evaluate every PromQL expression of
//! dashboards/brownout.json and dashboards/alerts.yaml. Each must succeed and return series.
//! Alert expressions (and the annotation) are evaluated without their final threshold
//! comparison: a quiet alert returns nothing by design, but the series under it must exist.
//! Prometheus runs with the README's scrape config ("Scrape it"), /metrics behind the admin
//! token. Also runs `promtool check rules` and `promtool test rules`.
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod common;

use brownout::config::HumanDuration;
use brownout::ops::Change;
use brownout::Mode;
use brownout_cli::config::CliConfig;
use brownout_cli::demo::Demo;
use common::free_port;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DASHBOARDS: &str = concat!(concat!(env!("CARGO_MANIFEST_DIR"), "/.."), "/dashboards");

fn need(tool: &str) {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "{tool} is not installed: `bash .ci/run` installs it (apt-get install -y prometheus)"
    );
}

/// Every string under a key named `expr`.
fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| exprs(i, out)),
        _ => {}
    }
}

/// Grafana's variables, as a query run over this short test would see them.
fn instantiate(expr: &str) -> String {
    expr.replace("$__rate_interval", "30s")
        .replace("$__range", "1m")
        .replace("$__interval", "5s")
        .replace("$instance", ".*")
}

/// The expression without a trailing `<op> <number>` filter.
fn without_threshold(expr: &str) -> String {
    let e = expr.trim();
    for op in ["==", "!=", ">=", "<=", ">", "<"] {
        if let Some(i) = e.rfind(op) {
            let rest = e[i + op.len()..].trim();
            if !rest.is_empty() && rest.parse::<f64>().is_ok() {
                return e[..i].trim().to_owned();
            }
        }
    }
    e.to_owned()
}

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The scrape config of docs/observability.md ("Scrape it"), its paths and port filled in for
/// this run.
fn readme_scrape_config(target: &str, token_file: &Path) -> String {
    let readme = std::fs::read_to_string(concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
        "/docs/observability.md"
    ))
    .unwrap();
    let section = readme
        .split_once("**Scrape it.**")
        .expect("the section of docs/observability.md")
        .1;
    let block = section
        .split_once("```yaml\n")
        .and_then(|(_, rest)| rest.split_once("```\n"))
        .expect("its yaml block")
        .0;
    let mut config = block.to_owned();
    for (from, to) in [
        (
            "/etc/prometheus/brownout-alerts.yaml",
            format!("{DASHBOARDS}/alerts.yaml"),
        ),
        ("127.0.0.1:9090", target.to_owned()),
        (
            "/etc/prometheus/brownout-token",
            token_file.display().to_string(),
        ),
        ("scrape_interval: 15s", "scrape_interval: 1s".to_owned()),
    ] {
        assert!(config.contains(from), "the README's block lost {from}");
        config = config.replace(from, &to);
    }
    format!("global:\n  evaluation_interval: 1s\n{config}")
}

fn start_prometheus(dir: &Path, target: &str, token: &str) -> (Prometheus, String) {
    let port = free_port();
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let config = readme_scrape_config(target, &token_file);
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    (Prometheus(child), format!("http://127.0.0.1:{port}"))
}

async fn query(client: &awc::Client, prom: &str, expr: &str) -> Result<usize, String> {
    let mut res = client
        .get(format!("{prom}/api/v1/query"))
        .query(&[("query", expr)])
        .map_err(|e| e.to_string())?
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let body: Value = res.json().limit(1 << 22).await.map_err(|e| e.to_string())?;
    if body["status"] != "success" {
        return Err(format!("error: {}", body["error"]));
    }
    Ok(body["data"]["result"].as_array().map_or(0, Vec::len))
}

#[actix_web::test]
async fn every_dashboard_and_alert_query_returns_series_from_a_real_prometheus() {
    need("prometheus");
    need("promtool");
    for args in [
        vec!["check", "rules", "alerts.yaml"],
        vec!["test", "rules", "alerts_test.yaml"],
    ] {
        let out = Command::new("promtool")
            .args(&args)
            .current_dir(DASHBOARDS)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let mut config = CliConfig::demo();
    config.brownout.admin.bind = "127.0.0.1:0".into();
    // /metrics behind the token, as the README's scrape config expects it may be.
    let token = "prometheus-test-token-0123456789";
    config.brownout.admin.metrics_auth = true;
    config.brownout.admin.token_env = "BROWNOUT_PROMETHEUS_TEST_TOKEN".into();
    std::env::set_var("BROWNOUT_PROMETHEUS_TEST_TOKEN", token);
    config.demo.bind = "127.0.0.1:0".into();
    config.demo.workers = 4;
    config.demo.service_time = HumanDuration::from_millis(5);
    config.brownout.limiters.worker_utilization.sample_interval = HumanDuration::from_millis(500);
    config.brownout.limiters.request_rate.mode = Mode::Enforce;
    config.brownout.limiters.request_rate.rate = 50.0;
    config.brownout.limiters.request_rate.burst = 20;
    let demo = Demo::start(config).expect("demo starts");
    let dir = std::env::temp_dir().join(format!("brownout-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_prometheus, prom) = start_prometheus(&dir, &demo.admin_addr.to_string(), token);
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(5))
        .finish();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .get(format!("{prom}/-/ready"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .ok()
        != Some(200)
    {
        assert!(Instant::now() < deadline, "prometheus did not get ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Bounded load on loopback: at most 1,200 requests over ~6 s, every tier, a few keys (some
    // over their rate limit), and one admin change for the annotation.
    let app = format!("http://{}", demo.app_addr);
    let load_end = Instant::now() + Duration::from_secs(6);
    let mut sent = 0;
    while Instant::now() < load_end && sent < 1_200 {
        let (method, path) = [
            ("GET", "/v1/items"),
            ("POST", "/v1/items"),
            ("POST", "/v1/charges"),
        ][sent % 3];
        let key = format!(
            "Bearer {}_{}",
            if sent % 4 == 0 { "sk_test" } else { "sk_live" },
            sent % 5
        );
        let _ = client
            .request(method.parse().unwrap(), format!("{app}{path}"))
            .insert_header(("Authorization", key))
            .send()
            .await;
        sent += 1;
        if sent == 300 {
            demo.brownout
                .change(
                    Change::Mode {
                        limiter: brownout::limiter::LimiterName::FleetUsage,
                        mode: Mode::Dark,
                        ttl: None,
                    },
                    "test",
                )
                .await
                .unwrap();
        }
        if sent % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Let Prometheus scrape and evaluate a few more times.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let dashboard: Value = serde_json::from_slice(
        &std::fs::read(Path::new(DASHBOARDS).join("brownout.json")).unwrap(),
    )
    .unwrap();
    let mut panel_exprs = Vec::new();
    exprs(&dashboard["panels"], &mut panel_exprs);
    let mut threshold_exprs = Vec::new();
    exprs(&dashboard["annotations"], &mut threshold_exprs);
    let rules: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(Path::new(DASHBOARDS).join("alerts.yaml")).unwrap(),
    )
    .unwrap();
    exprs(&rules, &mut threshold_exprs);
    assert!(
        panel_exprs.len() >= 15 && threshold_exprs.len() == 8,
        "{} panel and {} rule expressions",
        panel_exprs.len(),
        threshold_exprs.len()
    );

    let mut failures = Vec::new();
    // The scrape with the token worked.
    if query(&client, &prom, "up{job=\"brownout\"} == 1").await != Ok(1) {
        failures.push("up{job=\"brownout\"} is not 1: the scrape failed".to_owned());
    }
    let all = panel_exprs.iter().map(|e| instantiate(e)).chain(
        threshold_exprs
            .iter()
            .map(|e| without_threshold(&instantiate(e))),
    );
    for expr in all {
        match query(&client, &prom, &expr).await {
            Ok(0) => failures.push(format!("no series: {expr}")),
            Ok(_) => {}
            Err(e) => failures.push(format!("{e}: {expr}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} queries failed:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // Without the token, no metrics.
    let anonymous = client
        .get(format!("http://{}/metrics", demo.admin_addr))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    // The exposition itself passes promtool's lint (HELP text on every metric, names, units).
    let scrape = client
        .get(format!("http://{}/metrics", demo.admin_addr))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .body()
        .limit(1 << 22)
        .await
        .unwrap();
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut lint.stdin.take().unwrap(), &scrape).unwrap();
    let out = lint.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    demo.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
