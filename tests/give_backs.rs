//! Every give-back of the chain, through the middleware on a real actix app: what a limiter
//! took for a request that a later limiter then refused comes back — request_rate's credits,
//! a quota's count, concurrent_requests' slot. The later limiter here is worker_utilization,
//! which refuses in the chain after the store has answered and kept everything (a refusal by
//! the store itself, all or nothing, keeps nothing and tests none of this). Each test fails
//! when its give-back is deleted.
mod common;

use actix_web::http::StatusCode;
use actix_web::{test, web, App, HttpResponse};
use brownout::config::{HumanDuration, PerIp, QuotaAlgorithm, QuotaConfig};
use brownout::{Config, Mode};
use common::Rig;

/// Only request_rate, per key, its bucket practically never refilling; worker_utilization
/// on (the rig sheds by hand).
fn bucket(burst: u32) -> Config {
    let mut c = common::config();
    let rr = &mut c.limiters.request_rate;
    (rr.mode, rr.rate, rr.burst, rr.per_ip) = (Mode::Enforce, 0.001, burst, PerIp::Off);
    c.limiters.adaptive_concurrency.mode = Mode::Off;
    c
}

/// `POST /v1/charges` with `key`: critical, or test traffic (shed first) with `test_mode`.
fn charge(key: &str, test_mode: bool) -> test::TestRequest {
    let req = test::TestRequest::post()
        .uri("/v1/charges")
        .insert_header(("Authorization", format!("Bearer {key}")));
    if test_mode {
        req.insert_header(("Brownout-Test-Mode", "true"))
    } else {
        req
    }
}

/// Sheds every sheddable tier, sends five test-mode charges of `key` (each taken by the
/// per-key limiters, then refused by worker_utilization), and returns how many critical
/// charges of the same key pass after them, of five.
async fn critical_after_shed_test_charges(config: Config, key: &str) -> usize {
    let rig = Rig::new(config);
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/v1/charges", web::post().to(HttpResponse::Created)),
    )
    .await;
    rig.shed_all().await;
    for _ in 0..5 {
        let res = test::call_service(&app, charge(key, true).to_request()).await;
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = test::read_body(res).await;
        assert!(
            String::from_utf8_lossy(&body).contains("worker_utilization"),
            "shed by the controller"
        );
    }
    let mut passed = 0;
    for _ in 0..5 {
        let res = test::call_service(&app, charge(key, false).to_request()).await;
        if res.status() == StatusCode::CREATED {
            passed += 1;
        }
    }
    passed
}

#[actix_web::test]
async fn credits_come_back_when_a_later_limiter_refuses() {
    // Three credits: spent by the shed test charges unless given back.
    assert_eq!(
        critical_after_shed_test_charges(bucket(3), "sk_live_c").await,
        3
    );
}

#[actix_web::test]
async fn a_quotas_count_comes_back_when_a_later_limiter_refuses() {
    for algorithm in [
        QuotaAlgorithm::FixedWindow,
        QuotaAlgorithm::SlidingWindow,
        QuotaAlgorithm::SlidingLog,
    ] {
        let mut c = bucket(1_000);
        let quota = QuotaConfig::new("charges", algorithm, 3, HumanDuration::from_secs(3_600))
            .with_routes(["POST /v1/charges"]);
        c.limiters.request_rate.quotas.push(quota);
        let passed = critical_after_shed_test_charges(c, "sk_live_q").await;
        assert_eq!(passed, 3, "{algorithm:?}");
    }
}

#[actix_web::test]
async fn a_concurrency_slot_comes_back_when_a_later_limiter_refuses() {
    // One request in flight per key: the shed test charges' slots must not stay taken.
    let mut c = common::config();
    let cr = &mut c.limiters.concurrent_requests;
    (cr.mode, cr.max_in_flight) = (Mode::Enforce, 1);
    c.limiters.adaptive_concurrency.mode = Mode::Off;
    assert_eq!(critical_after_shed_test_charges(c, "sk_live_s").await, 5);
}

#[actix_web::test]
async fn a_fleet_slot_comes_back_when_a_later_limiter_refuses() {
    // Four slots for non-critical requests: were the shed test charges' slots kept, the fifth
    // would be refused by fleet_usage, not shed by the controller.
    let mut c = common::config();
    let fu = &mut c.limiters.fleet_usage;
    (fu.mode, fu.capacity, fu.reserved_for_critical) = (Mode::Enforce, 5, 0.2);
    c.limiters.adaptive_concurrency.mode = Mode::Off;
    assert_eq!(critical_after_shed_test_charges(c, "sk_live_f").await, 5);
}

#[actix_web::test]
async fn credits_come_back_when_the_waiting_room_turns_a_request_away() {
    use actix_web::dev::Service;
    use std::rc::Rc;
    use std::sync::Arc;
    use std::time::Duration;
    // A limit of two, a waiting room of 50 ms, three credits for the key that waits.
    let mut c = bucket(3);
    c.limiters.worker_utilization.mode = Mode::Off;
    let a = &mut c.limiters.adaptive_concurrency;
    (a.mode, a.initial_limit, a.get_share, a.test_share) = (Mode::Enforce, 2, 1.0, 1.0);
    (a.queue, a.tier_hold) = (4, HumanDuration::from_secs(0));
    a.max_wait = HumanDuration::from_millis(50);
    let rig = Rig::new(c);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let app = Rc::new(
        test::init_service(
            App::new()
                .wrap(rig.brownout.middleware())
                .app_data(web::Data::new(gate.clone()))
                .route(
                    "/slow",
                    web::get().to(|gate: web::Data<Arc<tokio::sync::Semaphore>>| async move {
                        gate.acquire().await.expect("open").forget();
                        HttpResponse::Ok().finish()
                    }),
                )
                .route("/v1/charges", web::post().to(HttpResponse::Created)),
        )
        .await,
    );
    // Two slow requests of another key fill the limit.
    let holders: Vec<_> = (0..2)
        .map(|_| {
            let (app, req) = (
                app.clone(),
                test::TestRequest::get().uri("/slow").to_request(),
            );
            actix_web::rt::spawn(async move { app.call(req).await.map(|r| r.status()) })
        })
        .collect();
    for _ in 0..500 {
        if rig.metric("brownout_in_flight_requests{tier=\"get\"}") == 2.0 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    // Each test charge of the key is charged, waits, and is refused: its credits come back.
    for _ in 0..3 {
        let res = test::call_service(&*app, charge("sk_live_w", true).to_request()).await;
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = String::from_utf8_lossy(&test::read_body(res).await).into_owned();
        assert!(body.contains("adaptive_concurrency"), "{body}");
    }
    gate.add_permits(2);
    for h in holders {
        assert_eq!(h.await.unwrap().unwrap(), StatusCode::OK);
    }
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let req = charge("sk_live_w", false).to_request();
        statuses.push(test::call_service(&*app, req).await.status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::CREATED,
            StatusCode::CREATED,
            StatusCode::CREATED,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}
