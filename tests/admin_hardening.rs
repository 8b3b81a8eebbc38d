//! The admin API against careless and hostile callers, over real HTTP on loopback: the token
//! before the body, slow and huge bodies, the one config document, answers that are only
//! given for durable changes, live timers, and no panic on contention.
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod common;

use brownout::config::HumanDuration;
use brownout::ops::{Change, ChangeError};
use brownout::Brownout;
use common::{config, raw_http, AdminOn, Rig};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const TOKEN: &str = "test-token";

fn request(method: &str, path: &str, auth: Option<&str>, body: &str) -> String {
    let auth = auth.map_or_else(String::new, |a| format!("Authorization: {a}\r\n"));
    format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

async fn the_scheme_is_case_insensitive(on: AdminOn) {
    let rig = Rig::new(config());
    let addr = on.serve(&rig.brownout);
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let auth = format!("{scheme} {TOKEN}");
        let res = raw_http(addr, request("GET", "/v1/state", Some(&auth), "")).await;
        assert_eq!(res.status, 200, "{scheme}");
    }
    let res = raw_http(
        addr,
        request("GET", "/v1/state", Some("Basic dGVzdA=="), ""),
    )
    .await;
    assert_eq!(res.status, 401);
}

/// Sends a head announcing `length` body bytes and `sent` of them, then waits for the answer
/// (at most 5 s), and says whether the server then closed the connection.
async fn partial(
    addr: SocketAddr,
    auth: Option<&'static str>,
    length: usize,
    sent: usize,
) -> (String, bool) {
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let auth = auth.map_or_else(String::new, |a| format!("Authorization: {a}\r\n"));
        let head = format!(
            "PUT /v1/kill-switch HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&vec![b' '; sent]).unwrap();
        let mut buf = Vec::new();
        let closed = s.read_to_end(&mut buf).is_ok();
        (String::from_utf8_lossy(&buf).into_owned(), closed)
    })
    .await
    .unwrap()
}

async fn the_token_is_checked_before_a_body_is_read(on: AdminOn) {
    let rig = Rig::new(config());
    let addr = on.serve(&rig.brownout);
    let started = Instant::now();
    // 200 KB announced, 1 KB sent, no token: 401 at once (not 413, not a wait), then closed.
    let (answer, closed) = partial(addr, None, 200_000, 1024).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(closed, "the connection is closed");
    assert!(started.elapsed() < Duration::from_secs(3));
    // The same with the token: 413, as problem+json.
    let (answer, _) = partial(addr, Some("Bearer test-token"), 200_000, 1024).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer
            .to_ascii_lowercase()
            .contains("content-type: application/problem+json"),
        "{answer}"
    );
    assert!(answer.contains("\"limit_bytes\":65536"), "{answer}");
    assert!(!rig.brownout.settings().kill_switch);
}

async fn a_body_that_does_not_arrive_in_time_closes_the_connection(on: AdminOn) {
    let mut c = config();
    c.admin.body_timeout = HumanDuration::from_millis(300);
    let rig = Rig::new(c);
    let addr = on.serve(&rig.brownout);
    let started = Instant::now();
    let (answer, closed) = partial(addr, Some("Bearer test-token"), 100, 10).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(closed);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(rig.brownout.settings().version, 1, "nothing changed");
}

async fn short_tokens_are_refused_off_loopback_and_allowed_on_it(on: AdminOn) {
    let short = Brownout::builder(brownout::Config::default())
        .admin_token("short")
        .build()
        .unwrap();
    let err = on
        .bind(&short, "0.0.0.0:0".parse().unwrap())
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(err.contains("at least 16"), "{err}");
    assert!(on.bind(&short, "127.0.0.1:0".parse().unwrap()).is_ok());
    let long = Brownout::builder(brownout::Config::default())
        .admin_token("0123456789abcdef")
        .build()
        .unwrap();
    assert!(on.bind(&long, "0.0.0.0:0".parse().unwrap()).is_ok());
}

async fn small_answers_head_requests_and_names(on: AdminOn) {
    let rig = Rig::new(config());
    let addr = on.serve(&rig.brownout);
    for path in ["/healthz", "/metrics"] {
        let res = raw_http(addr, request("HEAD", path, None, "")).await;
        assert_eq!((res.status, res.body.as_str()), (200, ""), "HEAD {path}");
    }
    let res = raw_http(
        addr,
        request(
            "PUT",
            "/v1/limiters/nosuch/mode",
            Some("Bearer test-token"),
            r#"{"mode":"off"}"#,
        ),
    )
    .await;
    assert_eq!(res.status, 404);
    assert!(
        res.body.contains("no limiter named `nosuch`"),
        "{}",
        res.body
    );
    assert!(!res.body.contains("Path("), "{}", res.body);
}

async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Value,
    headers: &[(&str, String)],
) -> (u16, Value) {
    let mut req = awc::Client::new()
        .request(method.parse().unwrap(), format!("http://{addr}{path}"))
        .bearer_auth(TOKEN);
    for (k, v) in headers {
        req = req.insert_header((*k, v.as_str()));
    }
    let mut res = if body.is_null() {
        req.send().await
    } else {
        req.insert_header(("content-type", "application/merge-patch+json"))
            .send_body(body.to_string())
            .await
    }
    .unwrap();
    let bytes = res.body().limit(1 << 20).await.unwrap();
    (
        res.status().as_u16(),
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn the_document_get_returns_is_the_document_patch_takes(on: AdminOn) {
    let rig = Rig::new(config());
    let addr = on.serve(&rig.brownout);
    let (status, mut doc) = send(addr, "GET", "/v1/config", Value::Null, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(doc["version"], 1);
    // Edit the GET document and send it back whole.
    doc["limiters"]["request_rate"]["rate"] = json!(42.0);
    let (status, answer) = send(addr, "PATCH", "/v1/config", doc.clone(), &[]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["limiters"]["request_rate"]["rate"], 42.0);
    assert_eq!(answer["version"], 2);
    // Sent back unchanged except for its (now stale) version: version is read-only.
    let (status, answer) = send(addr, "PATCH", "/v1/config", doc, &[]).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["field"], "version");
    // The kill switch is a member of the document too.
    let (status, answer) = send(
        addr,
        "PATCH",
        "/v1/config",
        json!({"kill_switch": true}),
        &[],
    )
    .await;
    assert_eq!((status, answer["kill_switch"].clone()), (200, json!(true)));
    assert!(rig.brownout.settings().kill_switch);
    // The old shape is named and explained.
    let (status, answer) = send(
        addr,
        "PATCH",
        "/v1/config",
        json!({"request_rate": {"rate": 1}}),
        &[],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(answer["field"], "request_rate");
    assert!(
        answer["detail"].as_str().unwrap().contains("\"limiters\""),
        "{answer}"
    );
    assert_eq!(rig.brownout.settings().version, 3);
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("brownout-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn a_change_that_cannot_be_persisted_is_refused_and_not_made(on: AdminOn) {
    let dir = scratch("unwritable");
    let path = dir.join("overrides.json");
    let mut c = config();
    c.admin.overrides_file = Some(path.clone());
    let rig = Rig::new(c);
    let addr = on.serve(&rig.brownout);
    let engage = || {
        send(
            addr,
            "PUT",
            "/v1/kill-switch",
            json!({"engaged": true}),
            &[],
        )
    };
    // The file's place is taken by a directory (with something in it): no write can land.
    std::fs::create_dir_all(path.join("in-the-way")).unwrap();
    let (status, answer) = engage().await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["type"], "urn:brownout:problem:not-persisted");
    assert_eq!(answer["file"], path.display().to_string());
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("admin.overrides_file"),
        "{answer}"
    );
    let s = rig.brownout.settings();
    assert!(!s.kill_switch && s.version == 1, "nothing changed");
    assert!(rig.brownout.audit().is_empty());
    // Once the file can be written again, the same change is made and durable.
    std::fs::remove_dir_all(&path).unwrap();
    let (status, _) = engage().await;
    assert_eq!(status, 200);
    let saved: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved["kill_switch"], true);

    // At start, a directory that is missing is an error naming the key.
    let mut c = config();
    c.admin.overrides_file = Some(dir.join("missing/overrides.json"));
    let err = Brownout::builder(c)
        .build()
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(err.starts_with("admin.overrides_file"), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn a_new_sample_interval_takes_effect_when_it_is_applied(on: AdminOn) {
    let rig = Rig::new(config());
    let addr = on.serve(&rig.brownout);
    let patch =
        |interval: &str| json!({"limiters": {"worker_utilization": {"sample_interval": interval}}});
    let (status, answer) = send(addr, "PATCH", "/v1/config", patch("1h"), &[]).await;
    assert_eq!(status, 400);
    assert_eq!(
        answer["field"],
        "limiters.worker_utilization.sample_interval"
    );
    assert!(
        answer["detail"].as_str().unwrap().contains("5m"),
        "{answer}"
    );
    let (status, _) = send(addr, "PATCH", "/v1/config", patch("5m"), &[]).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = rig.brownout.plan().samples;
    let (status, _) = send(addr, "PATCH", "/v1/config", patch("50ms"), &[]).await;
    assert_eq!(status, 200);
    // The sampler does not wait out the 5 minutes: samples come every 50 ms from now on.
    let deadline = Instant::now() + Duration::from_secs(3);
    while rig.brownout.plan().samples < before + 3 {
        assert!(Instant::now() < deadline, "the sampler is still waiting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, answer) = send(
        addr,
        "PATCH",
        "/v1/config",
        json!({"limiters": {"request_rate": {"eviction_interval": "2h"}}}),
        &[],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(answer["field"], "limiters.request_rate.eviction_interval");
}

#[test]
fn start_never_panics_while_changes_race_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for _ in 0..50 {
            let b = Brownout::builder(config())
                .custom_source(common::Gauge::default())
                .admin_token("a-token-for-the-race")
                .build()
                .unwrap();
            let racers: Vec<_> = (0..4)
                .map(|_| {
                    let b = b.clone();
                    tokio::spawn(async move {
                        for _ in 0..50 {
                            let _ = b.sample_now().await;
                            match b.change(Change::KillSwitch(false), "race").await {
                                Ok(_) | Err(ChangeError::NotRunning) => {}
                                Err(e) => panic!("{e}"),
                            }
                        }
                    })
                })
                .collect();
            b.start().unwrap();
            b.start().unwrap();
            for r in racers {
                r.await.unwrap();
            }
            b.shutdown().await;
        }
    });
}

/// Headers past the admin port's bound are refused before the token is compared (431), a list
/// of ETags in If-Match matches any of them, and a list where a section or a body belongs is
/// refused by name rather than read as the section's keys in order.
async fn huge_headers_etag_lists_and_lists_for_sections(on: AdminOn) {
    let rig = Rig::new(config());
    let addr = on.serve(&rig.brownout);
    let auth = format!("Bearer {TOKEN}");
    let huge = format!("Bearer {}", "x".repeat(100_000));
    let res = raw_http(addr, request("GET", "/v1/state", Some(&huge), "")).await;
    assert_eq!(res.status, 431, "{}", res.body);
    assert!(res.body.contains("\"limit_bytes\":16384"), "{}", res.body);
    // If-Match: "1", "999999" holds the version in force (1): applied.
    let patch = |if_match: &str, body: &str| {
        format!(
            "PATCH /v1/config HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nIf-Match: {if_match}\r\nContent-Type: application/merge-patch+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let rate = r#"{"limiters": {"request_rate": {"rate": 44}}}"#;
    let res = raw_http(addr, patch(r#""999999", "1""#, rate)).await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(rig.brownout.settings().version, 2);
    // None of them is the version in force: 412, nothing changed.
    let res = raw_http(addr, patch(r#""1", W/"3""#, rate)).await;
    assert_eq!(res.status, 412, "{}", res.body);
    let res = raw_http(addr, patch(r#""1", "two""#, rate)).await;
    assert_eq!(res.status, 400, "{}", res.body);
    assert_eq!(rig.brownout.settings().version, 2);
    // A list where a section belongs.
    let per_ip = r#"{"limiters": {"request_rate": {"per_ip": [1, 2]}}}"#;
    let res = raw_http(addr, patch("*", per_ip)).await;
    assert_eq!(res.status, 400, "{}", res.body);
    let answer: Value = serde_json::from_str(&res.body).unwrap();
    assert_eq!(answer["field"], "limiters.request_rate.per_ip", "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("must be a section of keys (rate, burst), or auto, or off, not a list"),
        "{answer}"
    );
    // And where a body belongs.
    let res = raw_http(
        addr,
        request("PUT", "/v1/kill-switch", Some(&auth), "[true]"),
    )
    .await;
    assert_eq!(res.status, 400, "{}", res.body);
    assert!(!rig.brownout.settings().kill_switch);
    assert_eq!(rig.brownout.settings().version, 2, "nothing changed");
}

/// Paths are matched segment by segment, each percent-decoded as actix's router reads them:
/// an escaped letter names the same endpoint, a broken escape names none, and the token is
/// asked for before any of it.
async fn percent_encoded_paths_name_the_same_endpoints(on: AdminOn) {
    let rig = Rig::new(config());
    let addr = on.serve(&rig.brownout);
    let auth = format!("Bearer {TOKEN}");
    let res = raw_http(addr, request("GET", "/v1/st%61te", None, "")).await;
    assert_eq!(res.status, 401, "{}", res.body);
    let res = raw_http(addr, request("GET", "/v1/st%61te", Some(&auth), "")).await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert!(res.body.contains("\"kill_switch\""), "{}", res.body);
    for (path, status) in [
        ("/v1/state/", 404),
        ("//v1/state", 404),
        ("/v1/st%6", 404),
        ("/v1/st%+1te", 404),
        ("/v1/clients/%zz", 400),
        ("/v1/clients/sk%20live", 400),
    ] {
        let res = raw_http(addr, request("GET", path, Some(&auth), "")).await;
        assert_eq!(res.status, status, "{path}: {}", res.body);
    }
    let res = raw_http(
        addr,
        request(
            "PUT",
            "/v1/limiters/request%5Frate/mode",
            Some(&auth),
            r#"{"mode":"dark"}"#,
        ),
    )
    .await;
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(
        rig.brownout.settings().limiters.request_rate.mode,
        brownout::Mode::Dark
    );
}

/// Clients that hold connections open and send nothing (no token needed for that) do not lock
/// the operator out of the hyper admin server: past its bound on open connections, a new one
/// closes the oldest idle one. (actix's bound is 25,000 a worker.)
#[cfg(feature = "tower")]
#[actix_web::test]
async fn idle_connections_cannot_fill_the_hyper_admin_server() {
    let rig = Rig::new(config());
    let addr = AdminOn::Hyper.serve(&rig.brownout);
    let idle = tokio::task::spawn_blocking(move || {
        (0..300)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let started = Instant::now();
    let res = raw_http(addr, request("GET", "/healthz", None, "")).await;
    assert_eq!((res.status, res.body.as_str()), (200, "ok"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(idle);
}

crate::on_both_admin_servers!(
    percent_encoded_paths_name_the_same_endpoints,
    the_scheme_is_case_insensitive,
    the_token_is_checked_before_a_body_is_read,
    a_body_that_does_not_arrive_in_time_closes_the_connection,
    short_tokens_are_refused_off_loopback_and_allowed_on_it,
    small_answers_head_requests_and_names,
    the_document_get_returns_is_the_document_patch_takes,
    a_change_that_cannot_be_persisted_is_refused_and_not_made,
    a_new_sample_interval_takes_effect_when_it_is_applied,
    huge_headers_etag_lists_and_lists_for_sections,
);
