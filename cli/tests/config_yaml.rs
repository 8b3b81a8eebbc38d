//! config.yaml is the documented default: every value on a line without `# demo` must equal
//! the code's default, and every `# demo` value must differ from it.

mod common;

use brownout_cli::config::CliConfig;
use serde_json::Value;
use std::collections::BTreeSet;

const FILE: &str = concat!(concat!(env!("CARGO_MANIFEST_DIR"), "/.."), "/config.yaml");

/// Dotted keys of the lines of `text` whose comment says `demo`.
fn marked(text: &str) -> BTreeSet<String> {
    common::yaml_keys(text)
        .into_iter()
        .filter(|(_, _, rest)| {
            rest.split_once('#')
                .is_some_and(|(_, c)| c.trim().starts_with("demo"))
        })
        .map(|(_, path, _)| path)
        .collect()
}

/// Dotted paths where `a` and `b` differ (objects compared member by member).
fn differences(a: &Value, b: &Value, path: &str, out: &mut BTreeSet<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let null = Value::Null;
                differences(
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    &p,
                    out,
                );
            }
        }
        _ if a != b => {
            out.insert(path.to_owned());
        }
        _ => {}
    }
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .fold(v, |v, k| v.get(k).unwrap_or(&Value::Null))
}

#[test]
fn every_unmarked_value_is_the_default_and_every_demo_value_is_not() {
    let text = std::fs::read_to_string(FILE).unwrap();
    let shipped = serde_json::to_value(CliConfig::load(FILE.as_ref()).unwrap()).unwrap();
    let default = serde_json::to_value(CliConfig::default()).unwrap();
    let demo = marked(&text);
    assert!(demo.contains("limiters.request_rate.rate"), "{demo:?}");

    let mut differ = BTreeSet::new();
    differences(&shipped, &default, "", &mut differ);
    let unmarked: Vec<&String> = differ
        .iter()
        .filter(|p| {
            !demo
                .iter()
                .any(|m| *p == m || p.starts_with(&format!("{m}.")))
        })
        .collect();
    assert!(
        unmarked.is_empty(),
        "config.yaml differs from the defaults without saying `# demo`: {unmarked:?}"
    );
    let same: Vec<&String> = demo
        .iter()
        .filter(|m| at(&shipped, m) == at(&default, m))
        .collect();
    assert!(
        same.is_empty(),
        "marked `# demo` but equal to the default: {same:?}"
    );
}

/// Every setting of the library is written in config.yaml, set or commented out (`# url:`),
/// so that "every key documented" holds: a key added to the code and not to the file fails.
#[test]
fn every_setting_is_written_in_config_yaml() {
    let text = std::fs::read_to_string(FILE).unwrap();
    let default = serde_json::to_value(brownout::Config::default()).unwrap();
    let written: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.trim_start().trim_start_matches("# ").split_once(':'))
        .map(|(k, _)| k.trim().trim_matches('"').to_owned())
        .collect();
    let mut missing = Vec::new();
    fn keys(v: &Value, path: &str, out: &mut Vec<String>, written: &BTreeSet<String>) {
        let Value::Object(map) = v else { return };
        // A map of the user's own names (plans, costs) has no keys to write.
        if path.ends_with("plans") || path.ends_with("costs") {
            return;
        }
        for (k, v) in map {
            let p = format!("{path}.{k}");
            if !written.contains(k) {
                out.push(p.clone());
            }
            keys(v, &p, out, written);
        }
    }
    keys(&default, "", &mut missing, &written);
    assert!(missing.is_empty(), "config.yaml does not write {missing:?}");
}

/// `brownout check --config <path>`: its exit code and stderr.
#[test]
fn the_cpu_bound_demo_is_the_tuned_config_with_only_its_six_changes() {
    let cpu = concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
        "/docs/cpu-bound.yaml"
    );
    let tuned = concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/.."),
        "/docs/tuned.yaml"
    );
    let shipped = serde_json::to_value(CliConfig::load(tuned.as_ref()).unwrap()).unwrap();
    let bound = serde_json::to_value(CliConfig::load(cpu.as_ref()).unwrap()).unwrap();
    let mut changed = BTreeSet::new();
    differences(&shipped, &bound, "", &mut changed);
    let expected: BTreeSet<String> = [
        "demo.service_time",
        "demo.work",
        "demo.workers",
        "limiters.adaptive_concurrency.min_limit",
        "limiters.adaptive_concurrency.tolerance",
        "limiters.worker_utilization.capacity",
    ]
    .map(String::from)
    .into();
    assert_eq!(changed, expected);
    assert_eq!(at(&bound, "demo.work"), "cpu");
}

fn check(path: &std::path::Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_brownout"))
        .args(["check", "--config"])
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_check_command_refuses_an_empty_file_by_name() {
    let dir = std::env::temp_dir().join(format!("brownout-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("empty.yaml");
    std::fs::write(&path, "# nothing here\n").unwrap();
    let (code, err) = check(&path);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("empty.yaml") && err.contains("the file is empty"),
        "{err}"
    );

    std::fs::write(
        &path,
        "limiters:\n  fleet_usage:\n    capacity: \"eight\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_brownout"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        format!(
            "error: {}: limiters.fleet_usage.capacity must be a whole number (0 to 4294967295), not \"eight\" (line 3, column 15)",
            path.display()
        )
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_outside_the_repository_checks_the_defaults_and_a_named_file_must_exist() {
    let dir = std::env::temp_dir().join(format!("brownout-nocfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_brownout"))
        .arg("check")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("the defaults are valid"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_brownout"))
        .args(["check", "--config", "missing.yaml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: cannot read config file missing.yaml"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_short_admin_token_is_warned_about_once() {
    use std::io::{BufRead, BufReader};
    let dir = std::env::temp_dir().join(format!("brownout-short-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        "admin:\n  bind: 127.0.0.1:0\ndemo:\n  bind: 127.0.0.1:0\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_brownout"))
        .args(["--config"])
        .arg(&path)
        .env("BROWNOUT_ADMIN_TOKEN", "s3cret")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Everything said at start, until the demo says it listens (at most 20 s).
    let mut lines = Vec::new();
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(20)) {
        let up = line.contains("admin API listening on");
        lines.push(line);
        if up {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let warned = lines
        .iter()
        .filter(|l| l.contains("is 6 characters long; use at least 16"))
        .count();
    assert_eq!(warned, 1, "{lines:#?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
