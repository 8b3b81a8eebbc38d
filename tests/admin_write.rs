//! The admin API's write side over real HTTP on loopback: modes with ttl, kill switch, config
//! GET/PATCH with ETag and If-Match, audit, hardening, persistence across a restart.
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod common;

use brownout::Mode;
use common::{config, AdminClient as Client, Rig};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[actix_web::test]
async fn mode_changes_are_applied_counted_and_audited() {
    let rig = Rig::new(config());
    let c = Client::new(&rig).await;
    let (status, body, _) = c
        .send(
            "PUT",
            "/v1/limiters/worker_utilization/mode",
            Some(json!({"mode": "dark"})),
            &[],
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], 2);
    assert_eq!(
        rig.brownout.settings().limiters.worker_utilization.mode,
        Mode::Dark
    );
    assert_eq!(rig.metric("brownout_config_version"), 2.0);
    assert_eq!(
        rig.metric("brownout_admin_changes_total{action=\"mode\"}"),
        1.0
    );
    assert_eq!(
        rig.metric("brownout_limiter_mode{limiter=\"worker_utilization\",mode=\"dark\"}"),
        1.0
    );
    let (_, audit, _) = c.send("GET", "/v1/audit", None, &[]).await;
    let entry = &audit["entries"][0];
    assert_eq!(entry["action"], "mode");
    assert_eq!(
        entry["before"],
        json!({"limiter": "worker_utilization", "mode": "enforce"})
    );
    assert_eq!(entry["after"]["mode"], "dark");
    assert_eq!(entry["version"], 2);
    assert!(entry["source"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(entry["time"].as_str().unwrap().ends_with('Z'));
}

#[actix_web::test]
async fn bad_requests_are_refused_and_change_nothing() {
    let rig = Rig::new(config());
    let c = Client::new(&rig).await;
    let mode = "/v1/limiters/request_rate/mode";
    let cases: Vec<(&str, &str, Option<Value>, u16, &str)> = vec![
        (
            "PUT",
            "/v1/limiters/nope/mode",
            Some(json!({"mode": "off"})),
            404,
            "",
        ),
        ("PUT", mode, Some(json!({"mode": "sideways"})), 400, "mode"),
        (
            "PUT",
            mode,
            Some(json!({"mode": "off", "tll_seconds": 5})),
            400,
            ".",
        ),
        (
            "PUT",
            mode,
            Some(json!({"mode": "off", "ttl_seconds": 0})),
            400,
            "ttl_seconds",
        ),
        (
            "PUT",
            mode,
            Some(json!({"mode": "off", "ttl_seconds": -1})),
            400,
            "ttl_seconds",
        ),
        (
            "PUT",
            "/v1/kill-switch",
            Some(json!({"engaged": "yes"})),
            400,
            "engaged",
        ),
        ("PATCH", "/v1/config", Some(json!([1, 2])), 400, "body"),
        (
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"worker_utilization": {"start_of_bad": 0.5}}})),
            400,
            "limiters.worker_utilization.start_of_bad",
        ),
        (
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"worker_utilization": {"start_of_badd": 0.9}}})),
            400,
            "limiters.worker_utilization",
        ),
        (
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"request_rate": {"rate": "fast"}}})),
            400,
            "limiters.request_rate.rate",
        ),
        (
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"request_rate": {"max_keys": 64}}})),
            400,
            "limiters.request_rate.max_keys",
        ),
        (
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"concurrent_requests": {"max_keys": 64}}})),
            400,
            "limiters.concurrent_requests.max_keys",
        ),
        (
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"worker_utilization": {"source": "in_flight"}}})),
            400,
            "limiters.worker_utilization.source",
        ),
        (
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"request_rate": {"quotas": [
                {"name": "q", "algorithm": "fixed_window", "limit": 1, "window": "1h", "routes": ["GET /"]}
            ]}}})),
            400,
            "limiters.request_rate.quotas",
        ),
        ("GET", mode, None, 405, ""),
        ("DELETE", "/v1/config", None, 405, ""),
    ];
    for (method, path, body, want, field) in cases {
        let (status, answer, _) = c.send(method, path, body.clone(), &[]).await;
        assert_eq!(status, want, "{method} {path} {body:?}: {answer}");
        if want == 400 {
            let named = answer["field"].as_str().unwrap_or_default();
            assert!(
                named.starts_with(field.trim_start_matches('.')) || field == ".",
                "{body:?} named {named:?}, want {field}"
            );
        }
    }
    assert_eq!(rig.brownout.settings().version, 1, "nothing changed");
    // Not JSON: 415. Too big: 413. No token: 401.
    let http = awc::Client::new();
    let url = format!("{}/v1/kill-switch", c.base);
    let res = http
        .put(&url)
        .bearer_auth("test-token")
        .insert_header(("content-type", "text/plain"))
        .send_body("engaged")
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 415);
    let huge = format!(
        "{{\"engaged\": true, \"pad\": \"{}\"}}",
        "x".repeat(70 * 1024)
    );
    let res = http
        .put(&url)
        .bearer_auth("test-token")
        .insert_header(("content-type", "application/json"))
        .send_body(huge)
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 413);
    let res = http
        .put(&url)
        .insert_header(("content-type", "application/json"))
        .send_body("{\"engaged\": true}")
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);
    assert_eq!(rig.brownout.settings().version, 1);
}

#[actix_web::test]
async fn a_mode_change_with_a_ttl_reverts_by_itself() {
    let rig = Rig::new(config());
    let c = Client::new(&rig).await;
    let (status, _, _) = c
        .send(
            "PUT",
            "/v1/limiters/worker_utilization/mode",
            Some(json!({"mode": "off", "ttl_seconds": 1})),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        rig.brownout.settings().limiters.worker_utilization.mode,
        Mode::Off
    );
    // The ttl runs on the brownout clock: no real waiting.
    rig.clock.advance(Duration::from_secs(1));
    rig.brownout.revert_due_now().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while rig.brownout.settings().limiters.worker_utilization.mode != Mode::Enforce {
        assert!(Instant::now() < deadline, "did not revert");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let audit = rig.brownout.audit();
    let revert = audit.last().unwrap();
    assert_eq!((revert.action, revert.source.as_str()), ("revert", "timer"));
    assert_eq!(revert.after["mode"], "enforce");
    assert_eq!(
        rig.metric("brownout_admin_changes_total{action=\"revert\"}"),
        1.0
    );
}

#[actix_web::test]
async fn the_kill_switch_turns_every_limiter_off_and_back() {
    let rig = Rig::new(config());
    rig.shed_all().await;
    let app = actix_web::test::init_service(
        actix_web::App::new()
            .wrap(rig.brownout.middleware())
            .route("/", actix_web::web::get().to(|| async { "ok" })),
    )
    .await;
    let get = || actix_web::test::TestRequest::get().uri("/").to_request();
    assert_eq!(
        actix_web::test::call_service(&app, get()).await.status(),
        503
    );
    let c = Client::new(&rig).await;
    let (status, _, _) = c
        .send(
            "PUT",
            "/v1/kill-switch",
            Some(json!({"engaged": true})),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        actix_web::test::call_service(&app, get()).await.status(),
        200
    );
    assert_eq!(rig.metric("brownout_kill_switch_engaged"), 1.0);
    let (_, state, _) = c.send("GET", "/v1/state", None, &[]).await;
    assert_eq!(state["kill_switch"], true);
    assert_eq!(
        state["limiters"]["worker_utilization"]["mode"], "enforce",
        "modes are kept"
    );
    c.send(
        "PUT",
        "/v1/kill-switch",
        Some(json!({"engaged": false})),
        &[],
    )
    .await;
    assert_eq!(
        actix_web::test::call_service(&app, get()).await.status(),
        503
    );
}

#[actix_web::test]
async fn patch_applies_live_with_etag_and_if_match() {
    let mut cfg = config();
    cfg.limiters.request_rate.mode = Mode::Enforce;
    let rig = Rig::new(cfg);
    let c = Client::new(&rig).await;
    let (status, body, headers) = c.send("GET", "/v1/config", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(headers.get("etag").unwrap(), "\"1\"");
    assert_eq!(body["limiters"]["request_rate"]["burst"], 500);
    let patch = json!({"limiters": {"request_rate": {"burst": 2, "rate": 0.001}, "worker_utilization": {"end_of_good": 0.6}}});
    let (status, body, headers) = c
        .send(
            "PATCH",
            "/v1/config",
            Some(patch.clone()),
            &[("if-match", "\"1\"")],
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers.get("etag").unwrap(), "\"2\"");
    assert_eq!(body["limiters"]["request_rate"]["burst"], 2);
    assert_eq!(body["limiters"]["worker_utilization"]["end_of_good"], 0.6);
    // The next request sees it: a burst of 2.
    let app = actix_web::test::init_service(
        actix_web::App::new()
            .wrap(rig.brownout.middleware())
            .route("/", actix_web::web::get().to(|| async { "ok" })),
    )
    .await;
    let codes: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(
                actix_web::test::call_service(
                    &app,
                    actix_web::test::TestRequest::get().uri("/").to_request(),
                )
                .await
                .status()
                .as_u16(),
            );
        }
        v
    };
    assert_eq!(codes, [200, 200, 429]);
    // A stale If-Match is refused with 412 and changes nothing.
    let (status, body, _) = c
        .send(
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"request_rate": {"burst": 9}}})),
            &[("if-match", "\"1\"")],
        )
        .await;
    assert_eq!(status, 412, "{body}");
    assert_eq!(body["current_version"], 2);
    assert_eq!(rig.brownout.settings().limiters.request_rate.burst, 2);
}

/// The controller's thresholds are exported as they are in force: those of the config at
/// start, then those of a live PATCH, for the dashboard to draw.
#[actix_web::test]
async fn utilization_thresholds_are_exported_and_follow_a_patch() {
    let mut cfg = config();
    let wu = &mut cfg.limiters.worker_utilization;
    (wu.end_of_good, wu.start_of_bad) = (0.8, 0.95);
    let rig = Rig::new(cfg);
    let threshold = |name: &str| {
        rig.metric(&format!(
            "brownout_utilization_threshold_ratio{{threshold=\"{name}\"}}"
        ))
    };
    assert_eq!(
        (threshold("end_of_good"), threshold("start_of_bad")),
        (0.8, 0.95)
    );
    let c = Client::new(&rig).await;
    let patch =
        json!({"limiters": {"worker_utilization": {"end_of_good": 0.85, "start_of_bad": 0.99}}});
    let (status, body, _) = c.send("PATCH", "/v1/config", Some(patch), &[]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (threshold("end_of_good"), threshold("start_of_bad")),
        (0.85, 0.99)
    );
    assert_eq!(rig.metric("brownout_config_version"), 2.0);
}

#[actix_web::test]
async fn two_operators_racing_on_one_version_one_wins() {
    let rig = Rig::new(config());
    let c = Client::new(&rig).await;
    let a = c.send(
        "PATCH",
        "/v1/config",
        Some(json!({"limiters": {"worker_utilization": {"end_of_good": 0.5}}})),
        &[("if-match", "\"1\"")],
    );
    let b = c.send(
        "PATCH",
        "/v1/config",
        Some(json!({"limiters": {"worker_utilization": {"end_of_good": 0.6}}})),
        &[("if-match", "\"1\"")],
    );
    let ((sa, _, _), (sb, _, _)) = tokio::join!(a, b);
    let mut statuses = [sa, sb];
    statuses.sort();
    assert_eq!(statuses, [200, 412]);
    assert_eq!(rig.brownout.settings().version, 2);
}

#[actix_web::test]
async fn changes_survive_a_restart_through_the_overrides_file() {
    let (cfg, dir) = common::with_overrides_file("overrides");
    let path = dir.join("overrides.json");
    {
        let rig = Rig::new(cfg.clone());
        let c = Client::new(&rig).await;
        c.send(
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"worker_utilization": {"end_of_good": 0.55}}})),
            &[],
        )
        .await;
        c.send(
            "PUT",
            "/v1/limiters/fleet_usage/mode",
            Some(json!({"mode": "dark"})),
            &[],
        )
        .await;
        c.send(
            "PUT",
            "/v1/kill-switch",
            Some(json!({"engaged": true})),
            &[],
        )
        .await;
        rig.brownout.shutdown().await;
    }
    let saved: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(saved["patch"]["worker_utilization"]["end_of_good"], 0.55);
    // A new process: config.yaml plus the overrides.
    let rig = Rig::new(cfg.clone());
    let s = rig.brownout.settings();
    assert_eq!(s.limiters.worker_utilization.end_of_good, 0.55);
    assert_eq!(s.limiters.fleet_usage.mode, Mode::Dark);
    assert!(s.kill_switch);
    assert_eq!(
        s.limiters.worker_utilization.start_of_bad, 0.97,
        "the rest is config.yaml"
    );
    // A corrupt file is reported and ignored: config.yaml applies.
    std::fs::write(&path, b"{\"patch\": [oops").unwrap();
    let rig = Rig::new(cfg);
    let s = rig.brownout.settings();
    assert_eq!(s.limiters.worker_utilization.end_of_good, 0.9);
    assert!(!s.kill_switch);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_web::test]
async fn patching_under_load_fails_no_request() {
    let mut cfg = config();
    cfg.limiters.request_rate.mode = Mode::Enforce;
    cfg.limiters.request_rate.rate = 1e6;
    cfg.limiters.request_rate.burst = 1_000_000;
    cfg.limiters.concurrent_requests.mode = Mode::Enforce;
    cfg.limiters.concurrent_requests.max_in_flight = 10_000;
    let rig = Rig::new(cfg);
    let c = Client::new(&rig).await;
    let app = std::rc::Rc::new(
        actix_web::test::init_service(
            actix_web::App::new()
                .wrap(rig.brownout.middleware())
                .route("/", actix_web::web::get().to(|| async { "ok" })),
        )
        .await,
    );
    let load = {
        let app = app.clone();
        actix_web::rt::spawn(async move {
            let mut failed = 0;
            for i in 0..2_000u32 {
                let req = actix_web::test::TestRequest::get()
                    .uri("/")
                    .insert_header(("Authorization", format!("Bearer k{}", i % 50)))
                    .to_request();
                failed +=
                    u32::from(actix_web::test::call_service(&*app, req).await.status() != 200);
                if i % 20 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            failed
        })
    };
    for i in 0..30 {
        let patch = json!({"limiters": {"request_rate": {"burst": 1_000_000 - i}, "worker_utilization": {"end_of_good": 0.6 + f64::from(i % 5) / 100.0}}});
        let (status, body, _) = c.send("PATCH", "/v1/config", Some(patch), &[]).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        load.await.unwrap(),
        0,
        "no request failed while the settings changed"
    );
    assert_eq!(rig.brownout.settings().version, 31);
}

/// Random JSON-ish bodies: valid shapes with wrong values, real and made-up keys, wrong
/// types, deep nesting, and byte-level mutations of all of them.
fn random_body(rng: &mut brownout::rng::SplitMix64) -> Vec<u8> {
    const KEYS: [&str; 16] = [
        "mode",
        "ttl_seconds",
        "engaged",
        "request_rate",
        "worker_utilization",
        "fleet_usage",
        "concurrent_requests",
        "rate",
        "burst",
        "end_of_good",
        "start_of_bad",
        "bands",
        "quotas",
        "max_keys",
        "costs",
        "nonsense",
    ];
    fn value(rng: &mut brownout::rng::SplitMix64, depth: u32) -> Value {
        match rng.next_u64() % if depth > 3 { 6 } else { 8 } {
            0 => Value::Null,
            1 => json!(rng.next_u64().is_multiple_of(2)),
            2 => json!((rng.next_f64() - 0.5) * 10f64.powi((rng.next_u64() % 8) as i32)),
            3 => json!(rng.next_u64() as i64),
            4 => json!(
                ["enforce", "dark", "off", "", "ENFORCE", "1s", "8s"]
                    [(rng.next_u64() % 7) as usize]
            ),
            5 => json!([value(rng, depth + 1), value(rng, depth + 1)]),
            _ => {
                let mut map = serde_json::Map::new();
                for _ in 0..rng.next_u64() % 4 {
                    map.insert(
                        KEYS[(rng.next_u64() % 16) as usize].into(),
                        value(rng, depth + 1),
                    );
                }
                Value::Object(map)
            }
        }
    }
    let mut bytes = value(rng, 0).to_string().into_bytes();
    match rng.next_u64() % 4 {
        0 if !bytes.is_empty() => bytes.truncate((rng.next_u64() as usize) % bytes.len()),
        1 if !bytes.is_empty() => {
            let i = (rng.next_u64() as usize) % bytes.len();
            bytes[i] = rng.next_u64() as u8;
        }
        2 => bytes.extend((0..rng.next_u64() % 8).map(|_| rng.next_u64() as u8)),
        _ => {}
    }
    bytes
}

#[actix_web::test]
async fn ten_thousand_random_bodies_never_crash_or_apply_invalid_settings() {
    let rig = Rig::new(config());
    let c = Client::new(&rig).await;
    let mut rng = brownout::rng::SplitMix64::new(2026);
    let targets = [
        ("PATCH", "/v1/config"),
        ("PUT", "/v1/limiters/worker_utilization/mode"),
        ("PUT", "/v1/limiters/request_rate/mode"),
        ("PUT", "/v1/kill-switch"),
    ];
    let (mut accepted, mut changes) = (0, 0);
    let mut before = rig.brownout.settings();
    for i in 0..10_000 {
        let (method, path) = targets[i % targets.len()];
        let body = random_body(&mut rng);
        let mut res = c
            .http
            .request(method.parse().unwrap(), format!("{}{path}", c.base))
            .bearer_auth("test-token")
            .insert_header(("content-type", "application/json"))
            .send_body(body.clone())
            .await
            .unwrap();
        let status = res.status().as_u16();
        let _ = res.body().await;
        assert!(
            matches!(status, 200 | 400 | 412),
            "{method} {path} {:?} -> {status}",
            String::from_utf8_lossy(&body)
        );
        let after = rig.brownout.settings();
        if status == 200 {
            accepted += 1;
            after.limiters.validate().expect("live settings stay valid");
            // A new version, or none when nothing changed.
            let moved =
                (after.limiters != before.limiters) || after.kill_switch != before.kill_switch;
            assert_eq!(after.version, before.version + u64::from(moved));
            changes += u64::from(moved);
        } else {
            assert_eq!(after.version, before.version, "a refusal changes nothing");
        }
        before = after;
    }
    println!("accepted {accepted} of 10000 random bodies, {changes} of them changes");
    let (status, _, _) = c.send("GET", "/v1/state", None, &[]).await;
    assert_eq!(status, 200, "still serving");
    assert_eq!(rig.brownout.settings().version, 1 + changes);
}

#[actix_web::test]
async fn a_revert_overtaken_by_a_patch_is_dropped_and_not_persisted() {
    let (cfg, dir) = common::with_overrides_file("overtaken");
    let path = dir.join("overrides.json");
    let rig = Rig::new(cfg);
    let c = Client::new(&rig).await;
    c.send(
        "PUT",
        "/v1/limiters/worker_utilization/mode",
        Some(json!({"mode": "off", "ttl_seconds": 1})),
        &[],
    )
    .await;
    let (status, _, _) = c
        .send(
            "PATCH",
            "/v1/config",
            Some(json!({"limiters": {"worker_utilization": {"mode": "dark"}}})),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let saved = || -> Value { serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap() };
    assert_eq!(saved()["reverts"].as_array().unwrap().len(), 1);
    // The timer fires, finds the mode changed by someone else, and leaves it.
    rig.clock.advance(Duration::from_secs(1));
    rig.brownout.revert_due_now().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !saved()["reverts"].as_array().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the overtaken revert stayed in the file"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        rig.brownout.settings().limiters.worker_utilization.mode,
        Mode::Dark
    );
    assert!(rig.brownout.audit().iter().all(|e| e.action != "revert"));
    std::fs::remove_dir_all(&dir).unwrap();
}
