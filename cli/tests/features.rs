//! What the binary's features change, in whichever build runs this file: `cargo run --release`
//! builds none of them (the demo, `check` and the admin client only) and answers for the rest
//! with the build that has it; `.ci/run` runs this file in that build and with every feature.

use std::process::{Command, Output};

fn brownout(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brownout"))
        .args(args)
        .output()
        .unwrap()
}

fn config_file(name: &str, text: &str) -> String {
    let path =
        std::env::temp_dir().join(format!("brownout-features-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn simulate_and_bench_run_with_tools_and_name_the_build_without() {
    for command in [
        &["simulate", "--help"][..],
        &["bench", "overload", "--help"],
    ] {
        let out = brownout(command);
        if cfg!(feature = "tools") {
            assert!(out.status.success(), "{command:?}: {}", stderr(&out));
        } else {
            assert_eq!(out.status.code(), Some(2), "{command:?}");
            let want = format!(
                "cargo run --release --features tools -- {}",
                command.join(" ")
            );
            assert!(
                stderr(&out).contains(&want),
                "{command:?}: {}",
                stderr(&out)
            );
        }
    }
}

#[test]
fn the_comparison_limiter_needs_tools_and_is_refused_by_name_without() {
    let file = config_file("alternative.yaml", "demo:\n  alternative_limiter: vegas\n");
    let out = brownout(&["--config", &file, "check"]);
    if cfg!(feature = "tools") {
        assert!(out.status.success(), "{}", stderr(&out));
    } else {
        assert_eq!(out.status.code(), Some(2));
        let text = stderr(&out);
        assert!(
            text.contains(
                "demo.alternative_limiter needs the brownout binary built with the `tools` feature"
            ),
            "{text}"
        );
    }
}

#[test]
fn fleet_mode_needs_fleet_and_says_how_to_build_it_without() {
    let file = config_file(
        "fleet.yaml",
        "store:\n  kind: redis\n  url: redis://127.0.0.1:6379/\n",
    );
    let out = brownout(&["--config", &file, "check"]);
    if cfg!(feature = "fleet") {
        assert!(out.status.success(), "{}", stderr(&out));
    } else {
        assert_eq!(out.status.code(), Some(2));
        let text = stderr(&out);
        assert!(text.contains("store.kind is redis"), "{text}");
        assert!(
            text.contains("cargo run --release --features fleet"),
            "{text}"
        );
    }
}
