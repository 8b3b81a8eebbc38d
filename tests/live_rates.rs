//! A rate or burst changed live (admin PATCH) never refuses a client that the settings it
//! replaced would have admitted at that instant, and after any change a client waits at most
//! the new bucket's full refill: what a client owes is kept in credits, capped at the new
//! burst, and carried to the new bucket by the first request after the change (admitted or
//! not), from which it runs down at the new rate. Through the middleware on a real actix app, the admin API over HTTP, on the
//! in-memory store and a manual clock.

mod common;

use actix_web::http::StatusCode;
use actix_web::{test, web, App, HttpResponse};
use brownout::config::{PerIp, PerIpConfig};
use brownout::{Config, Mode};
use common::{header, AdminClient, Rig};
use serde_json::{json, Value};
use std::time::Duration;

/// request_rate alone, enforcing `rate` per second and `burst` credits.
fn rated(rate: f64, burst: u32) -> Config {
    let mut c = common::config();
    c.limiters.worker_utilization.mode = Mode::Off;
    let rr = &mut c.limiters.request_rate;
    rr.mode = Mode::Enforce;
    rr.rate = rate;
    rr.burst = burst;
    // Per key only (every test request comes from one address): the ceiling's test sets it.
    rr.per_ip = PerIp::Off;
    c
}

fn get(key: &str) -> test::TestRequest {
    test::TestRequest::get()
        .uri("/v1/items")
        .insert_header(("Authorization", format!("Bearer {key}")))
}

macro_rules! app {
    ($rig:expr) => {
        test::init_service(App::new().wrap($rig.brownout.middleware()).route(
            "/v1/items",
            web::get().to(|| async { HttpResponse::Ok().body("items") }),
        ))
        .await
    };
}

/// Sends `$n` requests (`$req` makes the i-th) and checks that every one passes.
macro_rules! all_pass {
    ($app:expr, $n:expr, $req:expr, $what:expr) => {
        for i in 0..$n {
            let res = test::call_service(&$app, ($req)(i).to_request()).await;
            assert_eq!(res.status(), StatusCode::OK, "request {i} {}", $what);
        }
    };
}

/// PATCHes `/v1/config` and checks it was applied.
async fn patch(admin: &AdminClient, body: Value) {
    let (status, answer, _) = admin.send("PATCH", "/v1/config", Some(body), &[]).await;
    assert_eq!(status, 200, "{answer}");
}

#[actix_web::test]
async fn a_per_ip_ceiling_lowered_then_raised_back_refuses_nobody() {
    let mut c = rated(1_000.0, 1_000);
    c.limiters.request_rate.per_ip = PerIpConfig::new(100.0, 500).into();
    let rig = Rig::new(c);
    let admin = AdminClient::new(&rig).await;
    let app = app!(rig);
    let ceiling =
        |rate: f64| json!({"limiters": {"request_rate": {"per_ip": {"rate": rate, "burst": 500}}}});
    patch(&admin, ceiling(0.01)).await;
    let res = test::call_service(&app, get("sk_live_first").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    rig.clock.advance(Duration::from_secs(2));
    patch(&admin, ceiling(100.0)).await;
    // The address owes one credit (read at 100 a second: 10 ms, not 100 s): 499 more pass
    // at once, whatever key they carry.
    all_pass!(
        app,
        499,
        |i: u32| get(&format!("sk_live_{i}")),
        "after the raise"
    );
    let res = test::call_service(&app, get("sk_live_last").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&res, "retry-after"),
        "1",
        "one credit at 100 a second"
    );
}

#[actix_web::test]
async fn raising_the_rate_keeps_the_credits_a_client_holds() {
    let rig = Rig::new(rated(1.0, 150));
    let admin = AdminClient::new(&rig).await;
    let app = app!(rig);
    all_pass!(app, 50, |_| get("sk_live_spender"), "");
    patch(
        &admin,
        json!({"limiters": {"request_rate": {"rate": 1000.0}}}),
    )
    .await;
    // 100 credits held before the raise are held after it.
    all_pass!(app, 100, |_| get("sk_live_spender"), "after the raise");
    let res = test::call_service(&app, get("sk_live_spender").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // What it owes now refills at the new rate: 150 credits in 150 ms.
    rig.clock.advance(Duration::from_millis(150));
    all_pass!(app, 150, |_| get("sk_live_spender"), "after a full refill");
}

#[actix_web::test]
async fn a_client_that_spent_everything_at_a_slow_rate_is_free_soon_after_a_raise() {
    let rig = Rig::new(rated(0.5, 2));
    let admin = AdminClient::new(&rig).await;
    let app = app!(rig);
    all_pass!(app, 2, |_| get("sk_live_slow"), "");
    let res = test::call_service(&app, get("sk_live_slow").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "2");
    patch(
        &admin,
        json!({"limiters": {"request_rate": {"rate": 1000.0}}}),
    )
    .await;
    // It owes two credits: 2 ms at the new rate, not the 4 s of the old one. Its first
    // request after the change is refused (the bucket holds two, it owes two), and what it
    // owes runs down at the new rate from then on.
    let res = test::call_service(&app, get("sk_live_slow").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&res, "retry-after"),
        "1",
        "a millisecond, rounded up"
    );
    rig.clock.advance(Duration::from_millis(2));
    all_pass!(app, 2, |_| get("sk_live_slow"), "");
}

#[actix_web::test]
async fn after_a_cut_a_client_waits_at_most_the_new_full_refill() {
    let rig = Rig::new(rated(100.0, 100));
    let admin = AdminClient::new(&rig).await;
    let app = app!(rig);
    all_pass!(app, 100, |_| get("sk_live_heavy"), "");
    // Rate and burst cut tenfold: the client owed 100 credits, a bucket holds 10 now.
    patch(
        &admin,
        json!({"limiters": {"request_rate": {"rate": 10.0, "burst": 10}}}),
    )
    .await;
    let res = test::call_service(&app, get("sk_live_heavy").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // Its next credit comes within the new bucket's full refill (1 s), not 10 s later.
    rig.clock.advance(Duration::from_millis(100));
    let res = test::call_service(&app, get("sk_live_heavy").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    let res = test::call_service(&app, get("sk_live_heavy").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    rig.clock.advance(Duration::from_secs(1));
    all_pass!(app, 10, |_| get("sk_live_heavy"), "after a full refill");
}

#[actix_web::test]
async fn a_client_moving_to_another_plan_keeps_what_it_owes_capped_at_its_burst() {
    let mut c = rated(1.0, 10);
    c.classifier.trust_plan_header = true;
    c.limiters.request_rate.plans.insert(
        "enterprise".into(),
        brownout::config::PlanConfig::new(100.0, 1_000),
    );
    let rig = Rig::new(c);
    let app = app!(rig);
    let on = |plan: &'static str| get("sk_live_mover").insert_header(("Brownout-Plan", plan));
    all_pass!(app, 10, |_| on("default"), "");
    let res = test::call_service(&app, on("default").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // Upgraded: it owes the 10 credits it spent, of a bucket of 1,000.
    all_pass!(app, 990, |_| on("enterprise"), "after the upgrade");
    let res = test::call_service(&app, on("enterprise").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // Back on the small plan it owes a full bucket of it (10 credits), not 1,000: one credit
    // a second later it passes again.
    let res = test::call_service(&app, on("default").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "1");
    rig.clock.advance(Duration::from_secs(1));
    let res = test::call_service(&app, on("default").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
}

#[actix_web::test]
async fn the_per_ip_ceiling_reads_auto_off_or_a_limit_over_the_admin_api() {
    let rig = Rig::new(rated(20.0, 100));
    let admin = AdminClient::new(&rig).await;
    let ceiling = |rig: &Rig| rig.brownout.settings().limiters.request_rate.ceiling();
    // `rated` turns it off; null in a merge patch puts the default back: auto.
    let per_ip = |v: Value| json!({"limiters": {"request_rate": {"per_ip": v}}});
    patch(&admin, per_ip(Value::Null)).await;
    let (_, doc, _) = admin.send("GET", "/v1/config", None, &[]).await;
    assert_eq!(doc["limiters"]["request_rate"]["per_ip"], "auto");
    assert_eq!(ceiling(&rig), Some(PerIpConfig::new(200.0, 1_000)));
    patch(&admin, per_ip(json!({"rate": 5, "burst": 10}))).await;
    assert_eq!(ceiling(&rig), Some(PerIpConfig::new(5.0, 10)));
    patch(&admin, per_ip(json!("off"))).await;
    assert_eq!(ceiling(&rig), None);
    // Anything else is refused by name and changes nothing.
    for bad in [json!("sometimes"), json!([1, 2]), json!({"rate": 5})] {
        let (status, answer, _) = admin
            .send("PATCH", "/v1/config", Some(per_ip(bad.clone())), &[])
            .await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(answer["field"], "limiters.request_rate.per_ip", "{answer}");
        assert_eq!(ceiling(&rig), None);
    }
}

#[actix_web::test]
async fn the_elastic_bucket_keeps_what_a_client_holds_as_it_widens_and_narrows() {
    // Rate 1 and burst 10, both doubled while the server is idle (below end_of_good).
    let mut c = rated(1.0, 10);
    c.limiters.request_rate.elastic_factor = 2.0;
    let rig = Rig::new(c);
    let app = app!(rig);
    let count = |n: u32| {
        let app = &app;
        async move {
            let mut admitted = 0;
            for _ in 0..n {
                let req = get("sk_live_elastic").to_request();
                admitted += u32::from(test::call_service(app, req).await.status().is_success());
            }
            admitted
        }
    };
    // Busy: the normal bucket. The client spends 5 of its 10.
    rig.step(0.95, Duration::from_millis(1)).await;
    assert_eq!(count(5).await, 5);
    // Idle: the bucket widens to 20 and the client still owes its 5: 15 left (read as the
    // elastic bucket's own, its 5 s of debt would be 10 of the elastic credits: 10 left).
    rig.step(0.1, Duration::from_millis(1)).await;
    assert_eq!(count(30).await, 15);
    // Busy again: it owed 20 elastic credits, a normal bucket holds 10: it owes 10, and
    // its next credit comes one second later.
    rig.step(0.95, Duration::from_millis(1)).await;
    assert_eq!(count(1).await, 0);
    rig.clock.advance(Duration::from_secs(1));
    assert_eq!(count(2).await, 1);
}
