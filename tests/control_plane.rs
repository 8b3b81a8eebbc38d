//! The control plane as an operator making mistakes would use it, over the admin API on
//! loopback: values no setting should take are refused by name and change nothing, the
//! settings version never goes back across a restart, and a change that changes nothing is
//! not a change.
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod common;

use common::{config, AdminClient, Rig};
use serde_json::{json, Value};

/// `PATCH /v1/config` with `body`; the status, the answer and the ETag.
async fn patch(c: &AdminClient, body: Value, if_match: Option<&str>) -> (u16, Value, String) {
    let etag = if_match.map(|v| format!("\"{v}\""));
    let headers: Vec<(&str, &str)> = etag.iter().map(|e| ("If-Match", e.as_str())).collect();
    let (status, answer, headers) = c.send("PATCH", "/v1/config", Some(body), &headers).await;
    let etag = headers
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (status, answer, etag)
}

async fn version(c: &AdminClient) -> u64 {
    let (_, doc, _) = c.send("GET", "/v1/config", None, &[]).await;
    doc["version"].as_u64().unwrap()
}

async fn audit_len(c: &AdminClient) -> usize {
    let (_, audit, _) = c.send("GET", "/v1/audit", None, &[]).await;
    audit["entries"].as_array().map_or(0, Vec::len)
}

#[actix_web::test]
async fn values_that_would_break_the_server_are_refused_by_name_and_change_nothing() {
    let rig = Rig::new(config());
    let c = AdminClient::new(&rig).await;
    let before = rig.brownout.settings();
    let wu = |v: Value| json!({"limiters": {"worker_utilization": v}});
    let cases = [
        (
            wu(json!({"seconds_to_shed_all": 1e-320})),
            "limiters.worker_utilization.seconds_to_shed_all",
        ),
        (
            wu(json!({"seconds_to_shed_all": 1e-308})),
            "limiters.worker_utilization.seconds_to_shed_all",
        ),
        (
            wu(json!({"seconds_to_shed_all": 1.79e308})),
            "limiters.worker_utilization.seconds_to_shed_all",
        ),
        (
            wu(json!({"seconds_before_shedding": 0})),
            "limiters.worker_utilization.seconds_before_shedding",
        ),
        (
            wu(json!({"max_shed": {"get": 5e-324}})),
            "limiters.worker_utilization.max_shed.get",
        ),
        (
            wu(json!({"end_of_good": 1e-320})),
            "limiters.worker_utilization.end_of_good",
        ),
        (
            wu(json!({"bands": {"test": [0.0, 5e-324], "get": [5e-324, 0.5], "post": [0.5, 1.0]}})),
            "limiters.worker_utilization.bands.test",
        ),
        (
            wu(json!({"retry_after": "1000000d"})),
            "limiters.worker_utilization.retry_after",
        ),
        (
            json!({"limiters": {"adaptive_concurrency": {"test_share": 8e-270}}}),
            "limiters.adaptive_concurrency.test_share",
        ),
        (
            json!({"limiters": {"fleet_usage": {"reserved_for_critical": 2e-290}}}),
            "limiters.fleet_usage.reserved_for_critical",
        ),
        (
            json!({"limiters": {"fleet_usage": {"capacity": 1}}}),
            "limiters.fleet_usage.capacity",
        ),
        (
            json!({"limiters": {"request_rate": {"soft_overage": 1e-300}}}),
            "limiters.request_rate.soft_overage",
        ),
    ];
    for (body, key) in cases {
        let (status, answer, _) = patch(&c, body.clone(), None).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(
            detail.starts_with(&format!("{key} must")) || detail.starts_with(&format!("{key} is")),
            "{body}: {answer}"
        );
        assert_eq!(answer["field"], key, "{answer}");
        assert!(detail.len() < 300, "one readable sentence: {detail}");
    }
    let after = rig.brownout.settings();
    assert_eq!(after.limiters, before.limiters, "nothing changed");
    assert_eq!(version(&c).await, 1);
}

#[actix_web::test]
async fn the_worst_accepted_controller_settings_shed_and_recover() {
    // The fastest and the slowest the validator takes, then the shipped ones back: the plan
    // stays finite and idle samples bring it to rest.
    let rig = Rig::new(config());
    let c = AdminClient::new(&rig).await;
    let fast = json!({"limiters": {"worker_utilization": {"seconds_to_shed_all": 0.001, "seconds_before_shedding": 1}}});
    assert_eq!(patch(&c, fast, None).await.0, 200);
    for _ in 0..3 {
        let amount = rig.step(1.0, std::time::Duration::from_secs(8)).await;
        assert!(amount.is_finite() && amount <= 1.0, "{amount}");
    }
    let plan = rig.brownout.plan();
    assert_eq!(plan.probability.get, 1.0, "sheds at full speed: {plan:?}");
    let back = json!({"limiters": {"worker_utilization": {"seconds_to_shed_all": 120, "seconds_before_shedding": 28}}});
    assert_eq!(patch(&c, back, None).await.0, 200);
    for _ in 0..25 {
        rig.step(0.0, std::time::Duration::from_secs(8)).await;
    }
    let plan = rig.brownout.plan();
    assert!(
        plan.amount < 0.0 && plan.probability.test == 0.0,
        "{plan:?}"
    );
}

/// The way out of a slow return an operator does not want (docs/admin-api.md): turning
/// worker_utilization off and on again starts its controller from rest, at once, even when no
/// sample came between the two changes; the kill switch only pauses it.
#[actix_web::test]
async fn turning_worker_utilization_off_and_on_starts_it_from_rest() {
    let rig = Rig::new(config());
    let c = AdminClient::new(&rig).await;
    let mode = |m: &str| json!({"limiters": {"worker_utilization": {"mode": m}}});
    let shedding = |rig: &Rig| rig.brownout.plan().probability.get;
    let kill = |engaged: bool| json!({ "engaged": engaged });
    rig.shed_all().await;
    assert_eq!(shedding(&rig), 1.0);
    // The kill switch turns every limiter off while engaged, and leaves the controller as it
    // was: released, the overload's shedding is still in force.
    assert_eq!(
        c.send("PUT", "/v1/kill-switch", Some(kill(true)), &[])
            .await
            .0,
        200
    );
    assert_eq!(
        c.send("PUT", "/v1/kill-switch", Some(kill(false)), &[])
            .await
            .0,
        200
    );
    assert_eq!(
        shedding(&rig),
        1.0,
        "the kill switch pauses, it does not reset"
    );
    // Off then enforce, with no sample between them.
    assert_eq!(patch(&c, mode("off"), None).await.0, 200);
    assert_eq!(patch(&c, mode("enforce"), None).await.0, 200);
    let plan = rig.brownout.plan();
    assert!(
        plan.amount < 0.0 && plan.probability.test == 0.0 && plan.probability.get == 0.0,
        "at rest at once: {plan:?}"
    );
    // The next sample carries on from rest, not from the amount before.
    let amount = rig.step(0.5, std::time::Duration::from_secs(8)).await;
    assert!(amount < 0.0, "{amount}");
    assert_eq!(rig.brownout.plan().probability.test, 0.0);
    // While off, whatever the load, it stays at rest.
    assert_eq!(patch(&c, mode("off"), None).await.0, 200);
    for _ in 0..10 {
        assert!(rig.step(1.0, std::time::Duration::from_secs(28)).await < 0.0);
    }
    assert_eq!(patch(&c, mode("enforce"), None).await.0, 200);
    assert_eq!(rig.brownout.plan().probability.test, 0.0);
}

#[actix_web::test]
async fn the_settings_version_goes_on_across_a_restart() {
    let (cfg, dir) = common::with_overrides_file("version");
    {
        let rig = Rig::new(cfg.clone());
        let c = AdminClient::new(&rig).await;
        for (i, good) in [0.5, 0.55, 0.6, 0.65].into_iter().enumerate() {
            let body = json!({"limiters": {"worker_utilization": {"end_of_good": good}}});
            let (status, _, etag) = patch(&c, body, Some(&(i + 1).to_string())).await;
            assert_eq!((status, etag), (200, format!("\"{}\"", i + 2)));
        }
        rig.brownout.shutdown().await;
    }
    let rig = Rig::new(cfg);
    let c = AdminClient::new(&rig).await;
    assert_eq!(version(&c).await, 5, "the version from before the restart");
    for stale in 1..=4 {
        let body = json!({"limiters": {"worker_utilization": {"end_of_good": 0.7}}});
        let (status, answer, _) = patch(&c, body, Some(&stale.to_string())).await;
        assert_eq!(
            status, 412,
            "If-Match {stale} from before the restart: {answer}"
        );
    }
    let body = json!({"limiters": {"worker_utilization": {"end_of_good": 0.7}}});
    assert_eq!(patch(&c, body, Some("5")).await.2, "\"6\"");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The four ways an overrides file went wrong at start, through the real builder and
/// the admin API: what still holds is kept key by key, each key dropped is named (the log,
/// `/v1/state`, `brownout_overrides_dropped`), an engaged kill switch is never lost, and no
/// version is issued twice: an `If-Match` from before the restart is refused.
#[actix_web::test]
async fn a_restart_keeps_every_saved_change_that_holds_and_names_each_one_dropped() {
    let (cfg, dir) = common::with_overrides_file("restore");
    let path = cfg.admin.overrides_file.clone().unwrap();
    {
        let rig = Rig::new(cfg.clone());
        let c = AdminClient::new(&rig).await;
        let body = json!({
            "kill_switch": true,
            "limiters": {
                "request_rate": {"rate": 44},
                "worker_utilization": {"start_of_bad": 0.95}
            }
        });
        assert_eq!(patch(&c, body, Some("1")).await.2, "\"2\"");
        rig.brownout.shutdown().await;
    }
    // config.yaml edited: the saved start_of_bad 0.95 no longer validates beside it.
    let mut edited = cfg.clone();
    edited.limiters.worker_utilization.end_of_good = 0.96;
    edited.limiters.worker_utilization.start_of_bad = 0.98;
    {
        let rig = Rig::new(edited.clone());
        let c = AdminClient::new(&rig).await;
        let settings = rig.brownout.settings();
        assert!(settings.kill_switch);
        assert_eq!(settings.limiters.request_rate.rate, 44.0);
        assert_eq!(settings.limiters.worker_utilization.start_of_bad, 0.98);
        assert_eq!(version(&c).await, 3, "on from the last version issued");
        let (_, state, _) = c.send("GET", "/v1/state", None, &[]).await;
        let restored = &state["settings"]["restored"];
        assert_eq!(
            restored["dropped"][0]["key"], "limiters.worker_utilization.start_of_bad",
            "{state}"
        );
        assert!(restored["set_aside"]
            .as_str()
            .unwrap()
            .contains(".dropped-"));
        assert_eq!(rig.metric("brownout_overrides_dropped"), 1.0);
        let body = json!({"limiters": {"request_rate": {"rate": 45}}});
        assert_eq!(
            patch(&c, body, Some("2")).await.0,
            412,
            "an ETag from before"
        );
        rig.brownout.shutdown().await;
    }
    // The file cut short: the kill switch and the version are still read; the file is moved
    // aside, whole.
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
    let rig = Rig::new(edited);
    let c = AdminClient::new(&rig).await;
    assert!(rig.brownout.settings().kill_switch);
    assert!(version(&c).await > 3, "never a version issued before");
    let (_, state, _) = c.send("GET", "/v1/state", None, &[]).await;
    let restored = &state["settings"]["restored"];
    assert_eq!(
        restored["dropped"][0]["key"], "admin.overrides_file",
        "{state}"
    );
    let aside = restored["set_aside"].as_str().unwrap();
    assert_eq!(std::fs::read(aside).unwrap(), &whole[..whole.len() / 2]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_web::test]
async fn a_change_that_changes_nothing_keeps_the_version_and_writes_no_audit_entry() {
    let rig = Rig::new(config());
    let c = AdminClient::new(&rig).await;
    let body = json!({"limiters": {"worker_utilization": {"end_of_good": 0.6}}});
    assert_eq!(patch(&c, body.clone(), None).await.0, 200);
    let (v, entries) = (version(&c).await, audit_len(&c).await);
    assert_eq!((v, entries), (2, 1));
    // The same PATCH again, many times; an empty one; the GET document sent back whole.
    for _ in 0..300 {
        let (status, answer, etag) = patch(&c, body.clone(), None).await;
        assert_eq!((status, etag.as_str()), (200, "\"2\""), "{answer}");
    }
    assert_eq!(patch(&c, json!({}), Some("2")).await.0, 200);
    let (_, document, _) = c.send("GET", "/v1/config", None, &[]).await;
    let (status, answer, _) = patch(&c, document, Some("2")).await;
    assert_eq!(status, 200, "{answer}");
    // A kill switch set to its state, a mode set to itself (with a ttl too).
    let (status, _, _) = c
        .send(
            "PUT",
            "/v1/kill-switch",
            Some(json!({"engaged": false})),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    for body in [
        json!({"mode": "enforce"}),
        json!({"mode": "enforce", "ttl_seconds": 60}),
    ] {
        let (status, answer, _) = c
            .send(
                "PUT",
                "/v1/limiters/worker_utilization/mode",
                Some(body),
                &[],
            )
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!((version(&c).await, audit_len(&c).await), (2, 1));
    assert_eq!(
        rig.metric("brownout_admin_changes_total{action=\"patch\"}"),
        1.0,
        "one change counted"
    );
    // A real change after all that is the next version, and the log kept the first one.
    let body = json!({"limiters": {"worker_utilization": {"end_of_good": 0.65}}});
    assert_eq!(patch(&c, body, Some("2")).await.2, "\"3\"");
    assert_eq!(audit_len(&c).await, 2);
}

#[actix_web::test]
async fn a_reload_of_an_unchanged_file_is_not_a_change() {
    let dir = std::env::temp_dir().join(format!("brownout-noop-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("brownout.yaml");
    std::fs::write(
        &path,
        "limiters:\n  worker_utilization:\n    source: custom\n    sample_interval: 5m\n",
    )
    .unwrap();
    let rig = Rig::with(brownout::Config::load(&path).unwrap(), |b| {
        b.config_file(&path)
    });
    let c = AdminClient::new(&rig).await;
    for _ in 0..3 {
        let applied = rig.brownout.reload_config().await.unwrap();
        assert_eq!(applied.version, 1);
    }
    assert_eq!((version(&c).await, audit_len(&c).await), (1, 0));
    std::fs::write(&path, "limiters:\n  worker_utilization:\n    source: custom\n    sample_interval: 5m\n    end_of_good: 0.6\n").unwrap();
    assert_eq!(rig.brownout.reload_config().await.unwrap().version, 2);
    assert_eq!(audit_len(&c).await, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_web::test]
async fn refusals_read_as_one_true_sentence() {
    let rig = Rig::new(config());
    let c = AdminClient::new(&rig).await;
    let mode = "/v1/limiters/request_rate/mode";
    for (ttl, detail) in [
        (json!(-1), "must be between 1 and 604800 (a week), not -1"),
        (json!(0), "must be between 1 and 604800 (a week), not 0"),
        (json!(1.5), "must be a whole number, not 1.5"),
    ] {
        let body = json!({"mode": "dark", "ttl_seconds": ttl});
        let (status, answer, _) = c.send("PUT", mode, Some(body), &[]).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["field"], "ttl_seconds", "{answer}");
        assert_eq!(
            answer["detail"],
            format!("ttl_seconds: {detail}"),
            "{answer}"
        );
    }
    // A setting that sizes memory at start names the file, not a file name it may not have.
    let body = json!({"limiters": {"request_rate": {"max_keys": 4096}}});
    let (status, answer, _) = patch(&c, body, None).await;
    assert_eq!(status, 400, "{answer}");
    let detail = answer["detail"].as_str().unwrap();
    assert!(
        detail.contains("edit the configuration file and restart"),
        "{detail}"
    );
    assert!(!detail.contains("config.yaml"), "{detail}");
}

#[test]
fn the_builder_refuses_what_the_file_and_a_patch_refuse() {
    // A duration no file can write: Retry-After would read about 1.8e19 seconds.
    let mut c = config();
    c.limiters.concurrent_requests.retry_after =
        brownout::config::HumanDuration(std::time::Duration::MAX);
    let err = brownout::Brownout::builder(c)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("limiters.concurrent_requests.retry_after must be between 1ms and 1d"),
        "{err}"
    );
    let mut c = config();
    c.limiters.worker_utilization.seconds_to_shed_all = 1e-320;
    let err = brownout::Brownout::builder(c)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("limiters.worker_utilization.seconds_to_shed_all must be between 0.001 and 86400 seconds (got 1e-320)"),
        "{err}"
    );
}
