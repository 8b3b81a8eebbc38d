//! `store.sync: local_first` against a real Redis (a redis-server of the test's own on
//! loopback): two instances decide every request locally and reconcile request_rate's buckets
//! with Redis every 100 ms. One client sending ten times its rate, alternating between them
//! for 30 s, gets about its limit fleet-wide, and no request waits for Redis.

#![allow(clippy::disallowed_methods)] // real servers, real time

mod redis_server;

use actix_web::http::StatusCode;
use actix_web::{test, web, App, HttpResponse};
use brownout::config::{HumanDuration, StoreKind, StoreSync};
use brownout::{Brownout, Config, Mode};
use redis_server::{Cluster, RedisServer};
use std::time::{Duration, Instant};

const RATE: f64 = 50.0;
const BURST: u32 = 50;

/// Two started instances of `config`, and their apps.
macro_rules! pair {
    ($config:expr) => {{
        let start = |config: Config| {
            let b = Brownout::builder(config)
                .admin_token("test-token")
                .build()
                .unwrap();
            b.start().unwrap();
            b
        };
        let (a, b) = (start($config.clone()), start($config));
        let app = |brownout: &Brownout| {
            test::init_service(App::new().wrap(brownout.middleware()).route(
                "/v1/items",
                web::get().to(|| async { HttpResponse::Ok().body("items") }),
            ))
        };
        let (app_a, app_b) = (app(&a).await, app(&b).await);
        (a, b, app_a, app_b)
    }};
}

fn hybrid(redis: &RedisServer) -> Config {
    on(Some(redis.url()), Vec::new())
}

/// local_first on a standalone `url` or on Cluster `nodes`.
fn on(url: Option<String>, nodes: Vec<String>) -> Config {
    let mut c = Config::default();
    c.limiters.worker_utilization.mode = Mode::Off;
    let rr = &mut c.limiters.request_rate;
    rr.mode = Mode::Enforce;
    rr.rate = RATE;
    rr.burst = BURST;
    c.store.kind = StoreKind::Redis;
    c.store.url = url;
    c.store.nodes = nodes;
    c.store.sync = StoreSync::LocalFirst;
    c.store.sync_interval = HumanDuration::from_millis(100);
    c
}

/// Calls to the scripts Redis has run so far.
fn script_calls(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.connection())
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// One client at ten times its rate, open loop (request i is sent at i / (10 × rate)),
/// with API key `key`, alternating between `a` and `b` for `run`: (sent, admitted, seconds).
async fn alternate<S, B>(a: &S, b: &S, key: &str, run: Duration) -> (u64, u64, f64)
where
    S: actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse<B>,
        Error = actix_web::Error,
    >,
{
    let request = || {
        test::TestRequest::get()
            .uri("/v1/items")
            .insert_header(("Authorization", format!("Bearer {key}")))
            .to_request()
    };
    let every = Duration::from_secs_f64(1.0 / (10.0 * RATE));
    let t0 = Instant::now();
    let (mut sent, mut admitted) = (0u64, 0u64);
    while t0.elapsed() < run {
        let due = t0 + every * sent as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            actix_web::rt::time::sleep(wait).await;
        }
        let res = test::call_service(if sent % 2 == 0 { a } else { b }, request()).await;
        match res.status() {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("unexpected {other}"),
        }
        sent += 1;
    }
    (sent, admitted, t0.elapsed().as_secs_f64())
}

#[actix_web::test]
async fn two_instances_hold_one_limit_without_a_round_trip_per_request() {
    let redis = RedisServer::start();
    let config = hybrid(&redis);
    let (a, _b, app_a, app_b) = pair!(config);
    // Let both connect (they decide locally meanwhile; this test is about the fleet).
    actix_web::rt::time::sleep(Duration::from_millis(500)).await;
    let calls_before = script_calls(&redis);

    let (sent, admitted, elapsed) = alternate(
        &app_a,
        &app_b,
        "sk_live_alternating",
        Duration::from_secs(30),
    )
    .await;
    let limit = f64::from(BURST) + RATE * elapsed;
    let over = admitted as f64 / limit - 1.0;
    let rounds = script_calls(&redis) - calls_before;
    eprintln!(
        "local_first: {sent} requests in {elapsed:.1} s, {admitted} admitted against a limit of {limit:.0} ({:+.2}%); {rounds} script calls",
        over * 100.0
    );
    assert!(
        sent as f64 > 0.9 * 10.0 * RATE * elapsed,
        "the load fell behind: {sent}"
    );
    assert!(
        over <= 0.05,
        "{admitted} admitted, limit {limit:.0}: {:+.2}%",
        over * 100.0
    );
    assert!(
        over >= -0.10,
        "{admitted} admitted, limit {limit:.0}: starved"
    );
    // The requests never asked Redis: about one round per instance every 100 ms.
    assert!(
        rounds <= (elapsed * 10.0 * 2.0 * 1.5) as u64,
        "{rounds} script calls for {sent} requests"
    );
    let state = a.store_state();
    assert_eq!(state.0, "redis");
}

#[actix_web::test]
async fn on_a_cluster_the_rounds_reach_every_slot() {
    let cluster = Cluster::start();
    let config = on(None, cluster.urls());
    let (_a, _b, app_a, app_b) = pair!(config);
    actix_web::rt::time::sleep(Duration::from_millis(500)).await;
    for key in ["sk_live_one", "sk_live_two"] {
        let (sent, admitted, elapsed) =
            alternate(&app_a, &app_b, key, Duration::from_secs(5)).await;
        let limit = f64::from(BURST) + RATE * elapsed;
        let over = admitted as f64 / limit - 1.0;
        eprintln!(
            "cluster, {key}: {sent} sent, {admitted} admitted, limit {limit:.0} ({:+.1}%)",
            over * 100.0
        );
        // Over 5 s the first round's double burst weighs more than over 30 s.
        assert!(
            (-0.15..=0.10).contains(&over),
            "{admitted} admitted, limit {limit:.0}"
        );
    }
}

#[actix_web::test]
async fn without_redis_the_limits_are_each_instances_and_nothing_fails() {
    let mut redis = RedisServer::start();
    let config = hybrid(&redis);
    let (a, _b, app_a, app_b) = pair!(config);
    actix_web::rt::time::sleep(Duration::from_millis(300)).await;
    redis.kill();
    let (sent, admitted, elapsed) =
        alternate(&app_a, &app_b, "sk_live_alone", Duration::from_secs(2)).await;
    // Each instance holds its own bucket: at most twice the limit, and no request failed
    // (alternate panics on anything but 200 and 429).
    let limit = f64::from(BURST) + RATE * elapsed;
    assert!(admitted as f64 <= 2.0 * limit + 1.0, "{admitted} of {sent}");
    assert!(admitted as f64 >= limit, "{admitted} of {sent}");
    let metrics = a.render_metrics();
    let failed = metrics
        .lines()
        .find(|l| l.starts_with("brownout_store_errors_total{store=\"redis\",op=\"sync\"}"))
        .unwrap_or_else(|| panic!("no failed rounds counted:\n{metrics}"));
    assert!(!failed.ends_with(" 0"), "{failed}");
}
