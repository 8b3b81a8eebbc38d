//! Every limiter that keeps state in the store decides the same on Redis as in memory: the
//! same requests get the same answers, refused by the same limiter, and nothing fails open.
//! A limiter whose part of the ask the Redis path dropped (or whose reply it did not read)
//! would fail open there, and its case here would fail.

#![allow(clippy::disallowed_methods)] // real servers, real time

mod common;
mod redis_server;

use actix_web::http::StatusCode;
use actix_web::{test, web, App, HttpResponse};
use brownout::config::{HumanDuration, PerIpConfig, QuotaAlgorithm, QuotaConfig, StoreKind};
use brownout::{Config, Mode};
use common::Rig;
use redis_server::RedisServer;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// One limiter's case: its settings, and the requests that reach its limit.
struct Case {
    limiter: &'static str,
    config: fn() -> Config,
    /// Requests held in flight first (`GET /slow`, by these keys).
    held: &'static [&'static str],
    /// Then these, one after the other (`GET /v1/items`, or `/slow` to be held too).
    sent: &'static [(&'static str, &'static str)],
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            limiter: "request_rate",
            config: || common::slow_bucket(2),
            held: &[],
            sent: &[("/v1/items", "sk_live_a"); 3],
        },
        Case {
            limiter: "request_rate",
            config: || {
                let mut c = common::slow_bucket(1_000);
                c.limiters.request_rate.per_ip = PerIpConfig::new(0.001, 2).into();
                c
            },
            held: &[],
            sent: &[
                ("/v1/items", "sk_live_b1"),
                ("/v1/items", "sk_live_b2"),
                ("/v1/items", "sk_live_b3"),
            ],
        },
        Case {
            limiter: "request_rate",
            config: || {
                let mut c = common::slow_bucket(1_000);
                c.limiters.request_rate.quotas.push(
                    QuotaConfig::new(
                        "items",
                        QuotaAlgorithm::FixedWindow,
                        2,
                        HumanDuration::from_secs(3_600),
                    )
                    .with_routes(["GET /v1/items"]),
                );
                c
            },
            held: &[],
            sent: &[("/v1/items", "sk_live_c"); 3],
        },
        Case {
            limiter: "concurrent_requests",
            config: || {
                let mut c = common::slow_bucket(1_000);
                c.limiters.request_rate.mode = Mode::Off;
                c.limiters.concurrent_requests.mode = Mode::Enforce;
                c.limiters.concurrent_requests.max_in_flight = 1;
                c
            },
            held: &["sk_live_d"],
            sent: &[("/v1/items", "sk_live_d"), ("/v1/items", "sk_live_e")],
        },
        Case {
            limiter: "fleet_usage",
            config: || {
                let mut c = common::slow_bucket(1_000);
                c.limiters.request_rate.mode = Mode::Off;
                c.limiters.fleet_usage.mode = Mode::Enforce;
                c.limiters.fleet_usage.capacity = 2;
                c.limiters.fleet_usage.reserved_for_critical = 0.5;
                c
            },
            held: &["sk_live_f"],
            sent: &[("/v1/items", "sk_live_g")],
        },
    ]
}

async fn slow(gate: web::Data<Arc<Semaphore>>) -> HttpResponse {
    if let Ok(permit) = gate.acquire().await {
        permit.forget();
    }
    HttpResponse::Ok().body("slow")
}

/// The answers to `case`'s requests on `config`'s store: each status, the limiter that
/// refused it and the `RateLimit-Policy` it carried, and the fail-opens counted.
async fn answers(case: &Case, config: Config) -> (Vec<(u16, String, String)>, f64) {
    let redis = config.store.kind == StoreKind::Redis;
    let rig = Rig::new(config);
    if redis {
        let deadline = Instant::now() + Duration::from_secs(10);
        while rig.brownout.store_state() != ("redis", true, "closed") {
            assert!(Instant::now() < deadline, "not connected to Redis");
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let gate = Arc::new(Semaphore::new(0));
    let app = std::rc::Rc::new(
        test::init_service(
            App::new()
                .wrap(rig.brownout.middleware())
                .app_data(web::Data::new(gate.clone()))
                .route(
                    "/v1/items",
                    web::get().to(|| async { HttpResponse::Ok().body("items") }),
                )
                .route("/slow", web::get().to(slow)),
        )
        .await,
    );
    let mut held = Vec::new();
    for key in case.held {
        let app = app.clone();
        let req = test::TestRequest::get()
            .uri("/slow")
            .insert_header(("Authorization", format!("Bearer {key}")))
            .to_request();
        held.push(actix_web::rt::spawn(async move {
            test::call_service(&*app, req).await.status()
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.brownout.in_flight().get < case.held.len() as i64 {
        assert!(Instant::now() < deadline, "the held requests never got in");
        actix_web::rt::time::sleep(Duration::from_millis(5)).await;
    }
    let mut out = Vec::new();
    for (path, key) in case.sent {
        let req = test::TestRequest::get()
            .uri(path)
            .insert_header(("Authorization", format!("Bearer {key}")))
            .to_request();
        let res = test::call_service(&*app, req).await;
        let status = res.status();
        let policy = res
            .headers()
            .get("ratelimit-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = test::read_body(res).await;
        let limiter = if status == StatusCode::OK {
            String::new()
        } else {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            v["limiter"].as_str().unwrap_or_default().to_owned()
        };
        out.push((status.as_u16(), limiter, policy));
    }
    gate.add_permits(held.len());
    for h in held {
        assert_eq!(h.await.unwrap(), StatusCode::OK);
    }
    let text = rig.brownout.render_metrics();
    let failed_open: f64 = text
        .lines()
        .filter(|l| l.starts_with("brownout_fail_open_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    rig.brownout.shutdown().await;
    (out, failed_open)
}

#[actix_web::test]
async fn every_limiter_with_state_in_the_store_decides_on_redis_as_in_memory() {
    let redis = RedisServer::start();
    for case in cases() {
        let memory = answers(&case, (case.config)()).await;
        let mut config = (case.config)();
        config.store.kind = StoreKind::Redis;
        config.store.url = Some(redis.url());
        config.store.timeout = HumanDuration::from_millis(200);
        let on_redis = answers(&case, config).await;
        assert_eq!(
            memory.1, 0.0,
            "{}: nothing fails open in memory",
            case.limiter
        );
        assert!(
            memory.0.iter().any(|(_, l, _)| l == case.limiter),
            "{}: the case reaches its limit in memory: {:?}",
            case.limiter,
            memory.0
        );
        assert_eq!(
            on_redis, memory,
            "{}: on Redis as in memory (answers, RateLimit-Policy, fail-opens)",
            case.limiter
        );
    }
}
