//! The admin server over real HTTP on loopback: health, metrics, state, auth.

mod common;

use brownout::config::{HumanDuration, QuotaAlgorithm, QuotaConfig};
use common::{config, AdminOn, Rig};
use std::net::SocketAddr;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

async fn healthz_needs_no_token(on: AdminOn) {
    let rig = Rig::new(config());
    let base = rig.admin_on(on);
    let mut res = awc::Client::new()
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.body().await.unwrap(), "ok");
}

async fn metrics_are_prometheus_text_with_help(on: AdminOn) {
    let rig = Rig::new(config());
    let base = rig.admin_on(on);
    let mut res = awc::Client::new()
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let ct = res
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let text = String::from_utf8(res.body().await.unwrap().to_vec()).unwrap();
    for metric in [
        "brownout_requests_total",
        "brownout_rejections_total",
        "brownout_fail_open_total",
        "brownout_utilization_ratio",
        "brownout_utilization_threshold_ratio",
        "brownout_shedding_amount",
        "brownout_shed_probability",
        "brownout_in_flight_requests",
        "brownout_limiter_mode",
        "brownout_kill_switch_engaged",
        "brownout_decision_duration_seconds",
        "brownout_config_version",
        "brownout_build_info",
    ] {
        assert!(
            text.contains(&format!("# HELP {metric} ")),
            "no HELP for {metric}"
        );
    }
    assert_eq!(common::metric(&text, "brownout_config_version"), 1.0);
    assert_eq!(
        common::metric(
            &text,
            "brownout_limiter_mode{limiter=\"worker_utilization\",mode=\"enforce\"}"
        ),
        1.0
    );
}

async fn state_requires_the_token(on: AdminOn) {
    let rig = Rig::new(config());
    let base = rig.admin_on(on);
    let client = awc::Client::new();
    let url = format!("{base}/v1/state");
    let res = client.get(&url).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert!(res.headers().get("www-authenticate").is_some());
    for wrong in [
        "Bearer nope",
        "Bearer test-tokenX",
        "Bearer test-toke",
        "test-token",
        "Basic test-token",
    ] {
        let res = client
            .get(&url)
            .insert_header(("Authorization", wrong))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 401, "{wrong}");
    }
    let mut res = client
        .get(&url)
        .insert_header(("Authorization", "Bearer test-token"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let state: serde_json::Value = res.json().await.unwrap();
    assert_eq!(state["version"], 1);
    assert_eq!(state["kill_switch"], false);
    assert_eq!(state["limiters"]["worker_utilization"]["mode"], "enforce");
    assert_eq!(state["limiters"]["worker_utilization"]["end_of_good"], 0.9);
    assert_eq!(state["controller"]["capacity"]["source"], "learning");
    assert_eq!(state["limiters"]["request_rate"]["mode"], "off");
    assert_eq!(
        state["limiters"]["worker_utilization"]["counters"]["rejected"],
        0
    );
    let resting = state["controller"]["resting"].as_f64().unwrap();
    assert!((resting + 28.0 / 120.0).abs() < 1e-9);
    assert_eq!(state["controller"]["probability"]["test"], 0.0);
    assert_eq!(state["in_flight"]["get"], 0);
}

async fn state_shows_the_controller_after_shedding(on: AdminOn) {
    let rig = Rig::new(config());
    rig.shed_all().await;
    let state = common::state(&rig.admin_on(on)).await;
    assert_eq!(state["controller"]["amount"], 1.0);
    assert_eq!(state["controller"]["utilization"], 1.0);
    assert_eq!(state["controller"]["probability"]["post"], 1.0);
    assert_eq!(state["controller"]["probability"]["critical"], 0.0);
}

async fn wrong_method_and_unknown_path(on: AdminOn) {
    let rig = Rig::new(config());
    let base = rig.admin_on(on);
    let client = awc::Client::new();
    let res = client
        .post(format!("{base}/v1/state"))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers().get("allow").unwrap(), "GET");
    let res = client
        .delete(format!("{base}/v1/config"))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    assert_eq!(res.headers().get("allow").unwrap(), "GET, PATCH");
    // The method before what the path names: no key is read for a method the path refuses.
    let res = client
        .post(format!("{base}/v1/clients/%zz"))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 405);
    let res = client
        .get(format!("{base}/nope"))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 404);
    // Without the token, nothing is revealed: not even which routes exist.
    let res = client
        .post(format!("{base}/v1/state"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(
        res.headers().get("content-type").unwrap(),
        "application/problem+json"
    );
}

async fn metrics_can_require_the_token(on: AdminOn) {
    let mut c = config();
    c.admin.metrics_auth = true;
    let rig = Rig::new(c);
    let base = rig.admin_on(on);
    let client = awc::Client::new();
    let res = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(res.status(), 401);
    let res = client
        .get(format!("{base}/metrics"))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
}

async fn a_generated_token_refuses_a_public_bind(on: AdminOn) {
    let mut c = config();
    c.admin.token_env = "BROWNOUT_TEST_TOKEN_THAT_IS_NEVER_SET".into();
    let b = brownout::Brownout::builder(c)
        .custom_source(common::Gauge::default())
        .build()
        .unwrap();
    let err = on.bind(&b, "0.0.0.0:0".parse().unwrap()).err().unwrap();
    assert!(
        err.to_string()
            .contains("BROWNOUT_TEST_TOKEN_THAT_IS_NEVER_SET"),
        "{err}"
    );
    // On loopback a generated token is fine.
    assert!(on.bind(&b, loopback()).is_ok());
}

async fn a_clients_limits_are_read_without_spending_them(on: AdminOn) {
    use actix_web::{test, web, App};
    let mut c = config();
    let rr = &mut c.limiters.request_rate;
    (rr.mode, rr.rate, rr.burst) = (brownout::Mode::Enforce, 0.001, 5);
    let cr = &mut c.limiters.concurrent_requests;
    (cr.mode, cr.max_in_flight) = (brownout::Mode::Enforce, 3);
    // Two quotas per client: a counter and a sliding log, each shown as it stands.
    for algorithm in [QuotaAlgorithm::FixedWindow, QuotaAlgorithm::SlidingLog] {
        let name = format!("{algorithm:?}").to_lowercase();
        let quota = QuotaConfig::new(name, algorithm, 10, HumanDuration::from_secs(3_600));
        rr.quotas.push(quota.with_routes(["GET /v1/items"]));
    }
    let rig = Rig::new(c);
    let base = rig.admin_on(on);
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/v1/items", web::get().to(|| async { "items" })),
    )
    .await;
    for _ in 0..2 {
        let req = test::TestRequest::get()
            .uri("/v1/items")
            .insert_header(("Authorization", "Bearer sk_live_peek"))
            .to_request();
        assert_eq!(test::call_service(&app, req).await.status(), 200);
    }
    let client = awc::Client::new();
    let get = |path: String, token: Option<&'static str>| {
        let mut req = client.get(format!("{base}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    for _ in 0..3 {
        let mut res = get("/v1/clients/sk_live_peek".into(), Some("test-token"))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let state: serde_json::Value = res.json().await.unwrap();
        assert_eq!(state["request_rate"]["remaining"], 3, "{state}");
        assert_eq!(state["request_rate"]["burst"], 5);
        assert_eq!(state["request_rate"]["plan"], "default");
        assert!(state["request_rate"]["full_in_seconds"].as_u64().unwrap() > 0);
        assert_eq!(state["concurrent_requests"]["in_flight"], 0);
        assert_eq!(state["concurrent_requests"]["max_in_flight"], 3);
        for (i, name) in ["fixedwindow", "slidinglog"].into_iter().enumerate() {
            let quota = &state["quotas"][i];
            assert_eq!(
                (&quota["name"], &quota["limit"]),
                (&name.into(), &10.into())
            );
            assert_eq!(quota["remaining"], 8, "{quota}");
        }
        assert_eq!(
            state["quotas"][1]["reset_seconds"], 3_600,
            "the oldest event's"
        );
    }
    // A client never seen has a full bucket; reading it claims nothing.
    let mut res = get("/v1/clients/sk_live_new".into(), Some("test-token"))
        .await
        .unwrap();
    let state: serde_json::Value = res.json().await.unwrap();
    assert_eq!(state["request_rate"]["remaining"], 5, "{state}");
    assert_eq!(state["request_rate"]["full_in_seconds"], 0);
    assert_eq!(state["quotas"][1]["remaining"], 10, "{state}");
    assert_eq!(state["quotas"][1]["reset_seconds"], 0);
    // The token is required; hostile keys and queries are refused by name.
    assert_eq!(
        get("/v1/clients/sk_live_peek".into(), None)
            .await
            .unwrap()
            .status(),
        401
    );
    for (path, field) in [
        ("/v1/clients/bad%20key", "key"),
        ("/v1/clients/sk_live_peek?plan=gold&x=1", "query"),
        ("/v1/clients/sk_live_peek?plan=default&plan=gold", "query"),
    ] {
        let mut res = get(path.into(), Some("test-token")).await.unwrap();
        assert_eq!(res.status(), 400, "{path}");
        let body: serde_json::Value = res.json().await.unwrap();
        assert_eq!(body["field"], field, "{body}");
    }
}

async fn the_peek_reads_the_bucket_the_header_reports_while_elastic(on: AdminOn) {
    use actix_web::{test, web, App};
    // An idle server (a sample below end_of_good) widens the bucket by elastic_factor.
    let mut c = config();
    let rr = &mut c.limiters.request_rate;
    (rr.mode, rr.rate, rr.burst, rr.elastic_factor) = (brownout::Mode::Enforce, 0.001, 100, 1.5);
    let rig = Rig::new(c);
    rig.step(0.1, std::time::Duration::from_secs(8)).await;
    let base = rig.admin_on(on);
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/v1/items", web::get().to(|| async { "items" })),
    )
    .await;
    let req = test::TestRequest::get()
        .uri("/v1/items")
        .insert_header(("Authorization", "Bearer sk_live_elastic"))
        .to_request();
    let res = test::call_service(&app, req).await;
    let header = |name: &str| {
        res.headers()
            .get(name)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        header("ratelimit-policy"),
        "\"request_rate\";q=150;w=100000"
    );
    assert!(header("ratelimit").starts_with("\"request_rate\";r=149;"));
    let state = awc::Client::new()
        .get(format!("{base}/v1/clients/sk_live_elastic"))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    assert_eq!(state["request_rate"]["burst"], 150, "{state}");
    assert_eq!(state["request_rate"]["remaining"], 149, "{state}");
}

crate::on_both_admin_servers!(
    healthz_needs_no_token,
    metrics_are_prometheus_text_with_help,
    state_requires_the_token,
    state_shows_the_controller_after_shedding,
    wrong_method_and_unknown_path,
    metrics_can_require_the_token,
    a_generated_token_refuses_a_public_bind,
    a_clients_limits_are_read_without_spending_them,
    the_peek_reads_the_bucket_the_header_reports_while_elastic,
);
