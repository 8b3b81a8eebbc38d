//! `brownout admin …` against a real admin server on loopback.

#[path = "../../tests/common/mod.rs"]
mod common;

use brownout::Mode;
use std::process::Output;

/// Runs the binary (off the test's runtime thread, which serves the operator actor).
async fn cli(args: Vec<String>, token: Option<&'static str>) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_brownout"));
        cmd.args(&args).env_remove("BROWNOUT_ADMIN_TOKEN");
        if let Some(t) = token {
            cmd.env("BROWNOUT_ADMIN_TOKEN", t);
        }
        cmd.current_dir(std::env::temp_dir()).output().unwrap()
    })
    .await
    .unwrap()
}

fn args(url: &str, rest: &[&str]) -> Vec<String> {
    let mut v = vec!["admin".to_owned(), "--url".to_owned(), url.to_owned()];
    v.extend(rest.iter().map(|s| s.to_string()));
    v
}

#[actix_web::test]
async fn the_cli_drives_the_admin_api() {
    let rig = common::Rig::new(common::config());
    let admin = rig
        .brownout
        .admin_server_on("127.0.0.1:0".parse().unwrap())
        .unwrap();
    let url = format!("http://{}", admin.local_addr);
    actix_web::rt::spawn(admin.server);

    let out = cli(
        args(&url, &["mode", "request_rate", "dark", "--ttl", "600"]),
        Some("test-token"),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rig.brownout.settings().limiters.request_rate.mode,
        Mode::Dark
    );

    let out = cli(
        args(
            &url,
            &[
                "patch",
                r#"{"limiters":{"worker_utilization":{"end_of_good":0.65}}}"#,
                // The ETag as the HTTP API writes it works as well as the bare version.
                "--if-match",
                r#""2""#,
            ],
        ),
        Some("test-token"),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        rig.brownout
            .settings()
            .limiters
            .worker_utilization
            .end_of_good,
        0.65
    );

    let out = cli(args(&url, &["kill", "on"]), Some("test-token")).await;
    assert!(out.status.success());
    assert!(rig.brownout.settings().kill_switch);

    let out = cli(args(&url, &["state"]), Some("test-token")).await;
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["kill_switch"], true);

    // A reader that stops early (`| head`) is no error and no panic.
    let piped = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_brownout"))
                .args(["admin", "--url", &url, "state"])
                .env("BROWNOUT_ADMIN_TOKEN", "test-token")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            drop(child.stdout.take()); // `head` has read all it wanted
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap()
    };
    assert!(piped.status.success(), "{:?}", piped.status);
    assert!(
        piped.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );

    let out = cli(args(&url, &["audit"]), Some("test-token")).await;
    let audit: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(audit["entries"].as_array().unwrap().len(), 3);

    // Refusals exit non-zero with the server's reason; nothing changes.
    let out = cli(
        args(&url, &["mode", "request_rate", "sideways"]),
        Some("test-token"),
    )
    .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("400"));
    let out = cli(
        args(
            &url,
            &[
                "patch",
                r#"{"limiters":{"worker_utilization":{"end_of_good":0.9}}}"#,
                "--if-match",
                "1",
            ],
        ),
        Some("test-token"),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("412"), "{stderr}");
    assert!(
        stderr.contains(
            "Run `brownout admin config` (from a checkout: `cargo run --release -- admin config`)"
        ) && !stderr.contains("GET /v1/config"),
        "the advice is this tool's: {stderr}"
    );
    // A PATCH of the wrong type names its key once, in the file's words.
    let out = cli(
        args(
            &url,
            &["patch", r#"{"limiters":{"request_rate":{"rate":"fifty"}}}"#],
        ),
        Some("test-token"),
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"400: limiters.request_rate.rate must be a number, not "fifty""#),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("limiters.request_rate.rate").count(),
        1,
        "{stderr}"
    );
    let out = cli(args(&url, &["state"]), Some("wrong")).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("401: the admin API at ")
            && stderr.contains("did not accept the token in BROWNOUT_ADMIN_TOKEN"),
        "a token was sent: {stderr}"
    );
    let out = cli(args(&url, &["state"]), None).await;
    assert!(String::from_utf8_lossy(&out.stderr).contains("BROWNOUT_ADMIN_TOKEN"));
    assert_eq!(rig.brownout.settings().version, 4);
}
