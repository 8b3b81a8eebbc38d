//! The README's "Try the demo" blocks pasted whole into one shell, as a user pastes them: the
//! demo started in the background, waited for, then every curl; what each prints is checked
//! against what the README says beside it. The only changes: `cargo run --release` is the
//! binary this test suite built (a `cargo` on PATH that runs it), and the demo's two ports are
//! free ones (in the blocks and in copies of config.yaml and demo.yaml alike).
// The test waits in real time for a real server.
#![allow(clippy::disallowed_methods)]

mod common;

use common::free_port;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `sh` blocks of "## Try the demo" before its overload walkthrough (which needs wrk and
/// watch, and is `cli/tests/walkthrough.rs`'s).
fn demo_blocks(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## Try the demo\n")
        .nth(1)
        .and_then(|s| s.split("**Overload, in 20 seconds.**").next())
        .expect("the README has a \"Try the demo\" section");
    section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("\n```").next().unwrap().to_owned())
        .collect()
}

/// A command of the blocks and what the README says it prints: the comment at the end of its
/// line, and the lines of `#   ` that follow it.
#[derive(Debug)]
struct Step {
    command: String,
    says: String,
    prints: Vec<String>,
}

fn steps(blocks: &[String]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    // Inside a note in parentheses that spans lines.
    let mut in_note = false;
    for line in blocks.iter().flat_map(|b| b.lines()) {
        if let Some(printed) = line.strip_prefix("#   ") {
            let step = steps.last_mut().expect("a printed line follows a command");
            // A note in parentheses explains; it is not printed.
            let (printed, note) = printed.split_once('(').unwrap_or((printed, ""));
            let printed = if in_note { "" } else { printed.trim_end() };
            in_note = (in_note || !note.is_empty()) && !line.trim_end().ends_with(')');
            if !printed.is_empty() {
                step.prints.push(printed.to_owned());
            }
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (command, says) = match line.split_once("   #") {
            Some((c, s)) => (c.trim_end(), s.trim()),
            None => (line.trim_end(), ""),
        };
        steps.push(Step {
            command: command.to_owned(),
            says: says.to_owned(),
            prints: Vec::new(),
        });
    }
    steps
}

/// A run of the same status codes, as the README writes them (`201 201 ... 201 429 429 ...`):
/// the codes in order, each run once.
fn runs(tokens: &str) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for t in tokens.split_whitespace().filter(|t| *t != "...") {
        if out.last() != Some(&t) {
            out.push(t);
        }
    }
    out
}

/// `brownout_requests_total{tier="...",outcome="allowed"}` of a metrics snapshot, per tier.
fn allowed(snapshot: &str) -> BTreeMap<String, u64> {
    snapshot
        .split("brownout_requests_total{tier=\"")
        .skip(1)
        .filter_map(|s| {
            let (tier, rest) = s.split_once('"')?;
            let count = rest.strip_prefix(",outcome=\"allowed\"} ")?;
            Some((
                tier.to_owned(),
                count.split_whitespace().next()?.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn the_try_the_demo_blocks_pasted_whole_print_what_the_readme_says() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks = demo_blocks(&readme);
    assert!(blocks.len() >= 3, "{blocks:?}");
    assert!(
        blocks[0].contains("cargo run --release &\nuntil curl -sf localhost:8080/healthz"),
        "the first block waits for the demo it starts: {}",
        blocks[0]
    );
    let steps = steps(&blocks);

    let (app, admin) = (free_port(), free_port());
    let ports = |text: &str| {
        text.replace(":8080", &format!(":{app}"))
            .replace(":9090", &format!(":{admin}"))
    };
    let dir = std::env::temp_dir().join(format!("brownout-readme-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    for file in ["config.yaml", "demo.yaml"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        assert_ne!(ports(&text), text, "{file} names the demo's port");
        std::fs::write(dir.join(file), ports(&text)).unwrap();
    }
    // `cargo run --release [-- ARGS]` is the binary built for this test.
    let cargo = dir.join("bin/cargo");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\n[ \"$1 $2\" = \"run --release\" ] || {{ echo \"not the README's cargo: $*\" >&2; exit 99; }}\nshift 2\n[ \"$1\" = \"--\" ] && shift\nexec {:?} \"$@\"\n",
            env!("CARGO_BIN_EXE_brownout")
        ),
    )
    .unwrap();
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&cargo, executable).unwrap();

    // Each command as pasted, then a mark and the allowed requests per tier so far.
    let metrics = format!(
        "curl -s localhost:{admin}/metrics | grep '^brownout_requests_total' | tr '\\n' ' '"
    );
    let mut script = String::from("trap 'kill $(jobs -p) 2>/dev/null' EXIT\n");
    for (i, step) in steps.iter().enumerate() {
        script.push_str(&ports(&step.command));
        script.push_str(&format!("\necho; echo \"@@@ {i} $({metrics})\"\n"));
    }
    let out = Command::new("timeout")
        .args(["120", "bash", "-c", &script])
        .current_dir(&dir)
        .env(
            "PATH",
            format!(
                "{}:{}",
                dir.join("bin").display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Failed to connect") && !stderr.contains("not the README's cargo"),
        "{stderr}"
    );

    // What each command printed, and the tiers' counts after it.
    let mut printed: Vec<(String, BTreeMap<String, u64>)> = Vec::new();
    let mut current = String::new();
    for line in stdout.lines() {
        match line.strip_prefix("@@@ ") {
            Some(mark) => {
                let (_, snapshot) = mark.split_once(' ').unwrap_or((mark, ""));
                printed.push((std::mem::take(&mut current), allowed(snapshot)));
            }
            None => {
                current.push_str(line);
                current.push('\n');
            }
        }
    }
    assert_eq!(
        printed.len(),
        steps.len(),
        "every command ran:\n{stdout}\n{stderr}"
    );

    let mut checked = 0;
    for (i, step) in steps.iter().enumerate() {
        let (output, after) = &printed[i];
        let before = i.checked_sub(1).map(|j| &printed[j].1);
        let context = || format!("`{}` printed:\n{output}", step.command);
        // The comment beside the command.
        let says = step.says.as_str();
        if let Some(tier) = says.strip_suffix(" tier") {
            let grew = before.is_some_and(|b| after.get(tier) > b.get(tier));
            assert!(grew, "not a {tier} request: {}", context());
            assert!(output.starts_with("HTTP/1.1 20"), "{}", context());
            checked += 1;
        } else if says == "ok" {
            assert_eq!(output.trim(), "ok", "{}", context());
            checked += 1;
        } else if says.starts_with("Prometheus text") {
            assert!(output.lines().count() > 20, "{}", context());
            let prometheus = output.trim().lines().all(|l| l.starts_with("brownout_"));
            assert!(prometheus, "{}", context());
            checked += 1;
        } else if says.starts_with("live state") {
            let state: serde_json::Value = serde_json::from_str(output.trim())
                .unwrap_or_else(|e| panic!("{e}: {}", context()));
            assert!(state.get("controller").is_some(), "{}", context());
            checked += 1;
        } else if let Some(code) = says
            .split(':')
            .next()
            .filter(|c| c.len() == 3 && c.parse::<u16>().is_ok())
        {
            assert_eq!(output.trim(), code, "{}", context());
            checked += 1;
        }
        // The lines the README shows under it.
        for expected in &step.prints {
            if expected
                .split_whitespace()
                .next()
                .is_some_and(|t| t.parse::<u16>().is_ok())
            {
                // The runs the README shows, in order; after them ("..."), only its codes.
                // Requests sent in parallel print in the order they end, which a slow start
                // of the clients can change: each code shown, and no other, in any order.
                let (got, shown) = (runs(output), runs(expected));
                let only_shown = got.iter().all(|c| shown.contains(c));
                let as_shown = if step.command.contains("xargs -P") {
                    only_shown && shown.iter().all(|c| got.contains(c))
                } else {
                    only_shown && got.starts_with(&shown)
                };
                assert!(as_shown, "not {expected:?}: {}", context());
            } else {
                // A header line: the same, but for the seconds to a reset; in the first 8 s,
                // before the controller's first sample widens the bucket, the README's other
                // reading (q=100, r=95).
                let norm = |l: &str| {
                    l.trim()
                        .to_ascii_lowercase()
                        .split(", ")
                        .map(|f| f.split(";t=").next().unwrap().to_owned())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let early = norm(expected)
                    .replace("q=150", "q=100")
                    .replace("r=145", "r=95");
                assert!(
                    output
                        .lines()
                        .any(|l| norm(l) == norm(expected) || norm(l) == early),
                    "no {expected:?}: {}",
                    context()
                );
            }
            checked += 1;
        }
    }
    println!(
        "{checked} claims of the README checked over {} commands",
        steps.len()
    );
    assert!(checked >= 12, "{checked} claims checked");
    std::fs::remove_dir_all(&dir).unwrap();
}
