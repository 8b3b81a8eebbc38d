//! Fleet mode against a real Redis: redis-server processes started by the tests on loopback
//! ports. Two brownout instances (two middlewares, as on two servers) share one per-client
//! bucket, one fleet reserve and one set of concurrency permits; a dead server's permits
//! expire; a Redis outage degrades to local limits without failing a request, and shared
//! limits come back when Redis does.

#![allow(clippy::disallowed_methods)] // real servers, real time

mod common;
mod redis_server;

use actix_web::http::StatusCode;
use actix_web::{test, web, App, HttpResponse};
use brownout::config::{
    HumanDuration, PerIpConfig, QuotaAlgorithm, QuotaConfig, QuotaCount, StoreKind, StoreSync,
};
use brownout::{Config, Mode};
use common::Rig;
use redis_server::{Cluster, RedisServer};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// `config` in fleet mode on `redis`.
fn fleet(mut config: Config, redis: &RedisServer) -> Config {
    config.limiters.worker_utilization.mode = Mode::Off;
    config.store.kind = StoreKind::Redis;
    config.store.url = Some(redis.url());
    config.store.timeout = HumanDuration::from_millis(200);
    config
}

/// Waits until `rig` is connected to Redis with the breaker closed.
async fn shared(rig: &Rig) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = rig.brownout.store_state();
        if state == ("redis", true, "closed") {
            return;
        }
        assert!(Instant::now() < deadline, "not connected: {state:?}");
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn slow(gate: web::Data<Arc<Semaphore>>) -> HttpResponse {
    if let Ok(permit) = gate.acquire().await {
        permit.forget();
    }
    HttpResponse::Ok().body("slow")
}

macro_rules! app {
    ($rig:expr, $gate:expr) => {
        Rc::new(
            test::init_service(
                App::new()
                    .wrap($rig.brownout.middleware())
                    .app_data(web::Data::new($gate.clone()))
                    .route(
                        "/v1/items",
                        web::get().to(|| async { HttpResponse::Ok().body("items") }),
                    )
                    .route("/slow", web::get().to(slow))
                    .route("/v1/charges", web::post().to(charge)),
            )
            .await,
        )
    };
}

async fn charge(req: actix_web::HttpRequest) -> HttpResponse {
    if req.headers().contains_key("x-decline") {
        HttpResponse::PaymentRequired().body("card declined")
    } else {
        HttpResponse::Created().body("charged")
    }
}

fn get(key: &str) -> test::TestRequest {
    test::TestRequest::get()
        .uri("/v1/items")
        .insert_header(("Authorization", format!("Bearer {key}")))
}

fn gate() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(0))
}

#[actix_web::test]
async fn two_servers_share_one_bucket_per_client() {
    let redis = RedisServer::start();
    let config = fleet(common::slow_bucket(10), &redis);
    let (a, b) = (Rig::new(config.clone()), Rig::new(config));
    shared(&a).await;
    shared(&b).await;
    let (app_a, app_b) = (app!(a, gate()), app!(b, gate()));
    let mut allowed = 0;
    for i in 0..30 {
        let app = if i % 2 == 0 { &app_a } else { &app_b };
        let res = test::call_service(&**app, get("sk_live_alternating").to_request()).await;
        match res.status() {
            StatusCode::OK => allowed += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(res.headers().get("retry-after").unwrap(), "1000");
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(
        allowed, 10,
        "one bucket of 10 between the two servers, not 10 each"
    );
    // Another client has its own bucket, on either server.
    let other = test::call_service(&*app_b, get("sk_live_other").to_request()).await;
    assert_eq!(other.status(), StatusCode::OK);
    let rejected =
        "brownout_rejections_total{limiter=\"request_rate\",tier=\"get\",mode=\"enforce\"}";
    assert_eq!(a.metric(rejected) + b.metric(rejected), 20.0);
    assert_eq!(
        a.metric("brownout_store_errors_total{store=\"redis\",op=\"decide\"}"),
        0.0
    );
}

/// The Redis server's clock, µs since the Unix epoch.
fn server_now(c: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
    s * 1_000_000 + us
}

/// The fleet's set of non-critical requests in flight.
const FLEET: &str = "brownout:{fleet}:in_flight";

/// Members of the sorted set `key`.
fn card(c: &mut redis::Connection, key: &str) -> u64 {
    redis::cmd("ZCARD").arg(key).query(c).unwrap()
}

/// Permits in the client's hash `key` (every field but its bucket's, `t`).
fn permits(c: &mut redis::Connection, key: &str) -> u64 {
    let fields: u64 = redis::cmd("HLEN").arg(key).query(c).unwrap();
    fields.saturating_sub(1)
}

/// Waits (bounded) until `check` holds.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
}

#[actix_web::test]
async fn the_fleet_reserve_counts_every_servers_requests() {
    let redis = RedisServer::start();
    let mut config = common::config();
    let fu = &mut config.limiters.fleet_usage;
    fu.mode = Mode::Enforce;
    fu.capacity = 4;
    fu.reserved_for_critical = 0.5; // two non-critical slots for the fleet
    let config = fleet(config, &redis);
    let (a, b) = (Rig::new(config.clone()), Rig::new(config));
    shared(&a).await;
    shared(&b).await;
    let (gate_a, gate_b) = (gate(), gate());
    let (app_a, app_b) = (app!(a, gate_a), app!(b, gate_b));
    // Two slow GETs hold the fleet's two slots on server A.
    let mut held = Vec::new();
    for i in 0..2 {
        let app = app_a.clone();
        let req = test::TestRequest::get()
            .uri("/slow")
            .insert_header(("Authorization", format!("Bearer sk_holder_{i}")));
        held.push(actix_web::rt::spawn(async move {
            test::call_service(&*app, req.to_request()).await.status()
        }));
    }
    let mut c = redis.connection();
    until("two fleet slots taken", || card(&mut c, FLEET) == 2).await;
    // Server B has no request of its own in flight, yet the fleet is full for non-critical…
    let refused = test::call_service(&*app_b, get("sk_live_b").to_request()).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    // …and never for critical traffic.
    let critical = test::TestRequest::post()
        .uri("/v1/charges")
        .insert_header(("Authorization", "Bearer sk_live_b"))
        .to_request();
    assert_eq!(
        test::call_service(&*app_b, critical).await.status(),
        StatusCode::CREATED
    );
    // The slots come back when A's requests end, and B admits again.
    gate_a.add_permits(2);
    for h in held {
        assert_eq!(h.await.unwrap(), StatusCode::OK);
    }
    until("the slots given back", || card(&mut c, FLEET) == 0).await;
    let res = test::call_service(&*app_b, get("sk_live_b").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
}

#[actix_web::test]
async fn a_dead_servers_permits_expire_after_the_ttl() {
    let redis = RedisServer::start();
    let mut config = common::slow_bucket(1_000);
    let cr = &mut config.limiters.concurrent_requests;
    cr.mode = Mode::Enforce;
    cr.max_in_flight = 1;
    let mut config = fleet(config, &redis);
    config.store.permit_ttl = HumanDuration::from_secs(5);
    let rig = Rig::new(config);
    shared(&rig).await;
    let app = app!(rig, gate());
    let first = test::call_service(&*app, get("sk_live_c").to_request()).await;
    assert_eq!(first.status(), StatusCode::OK);
    drop(first); // the body holds the permit until it is gone
                 // The client's hash, hash-tagged by client: its bucket (field t) and its permits.
    let mut c = redis.connection();
    let clients: Vec<String> = redis::cmd("KEYS")
        .arg("brownout:*:client")
        .query(&mut c)
        .unwrap();
    assert_eq!(clients.len(), 1, "{clients:?}");
    let set = clients[0].clone();
    assert!(set.starts_with("brownout:{") && set.contains("}:"), "{set}");
    // A server died holding this client's only permit: refused while the permit is fresh…
    let now = server_now(&mut c);
    let _: () = redis::cmd("HSET")
        .arg(&set)
        .arg("dead-server:1")
        .arg(now)
        .query(&mut c)
        .unwrap();
    let refused = test::call_service(&*app, get("sk_live_c").to_request()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // …and admitted once it is older than the TTL (5 s): it is swept.
    let stale = now - 6_000_000;
    let _: () = redis::cmd("HSET")
        .arg(&set)
        .arg("dead-server:1")
        .arg(stale)
        .query(&mut c)
        .unwrap();
    let admitted = test::call_service(&*app, get("sk_live_c").to_request()).await;
    assert_eq!(admitted.status(), StatusCode::OK);
    let dead: Option<String> = redis::cmd("HGET")
        .arg(&set)
        .arg("dead-server:1")
        .query(&mut c)
        .unwrap();
    assert_eq!(dead, None, "the dead server's permit was swept");
    drop(admitted);
    until("the admitted request's permit given back", || {
        permits(&mut c, &set) == 0
    })
    .await;
    // The hash expires: not before its newest permit is past the TTL (5 s), and once its
    // bucket (two requests of 1,000 s each) would be full again.
    let ttl: i64 = redis::cmd("PTTL").arg(&set).query(&mut c).unwrap();
    assert!(ttl > 5_000 && ttl <= 3_000_000, "client hash TTL {ttl} ms");
}

#[actix_web::test]
async fn a_later_refusal_gives_the_credits_back_in_redis() {
    let redis = RedisServer::start();
    let mut config = common::slow_bucket(3);
    let fu = &mut config.limiters.fleet_usage;
    fu.mode = Mode::Enforce;
    fu.capacity = 2;
    fu.reserved_for_critical = 0.5; // one non-critical slot
    let rig = Rig::new(fleet(config, &redis));
    shared(&rig).await;
    let gate = gate();
    let app = app!(rig, gate);
    let holder = {
        let app = app.clone();
        let req = test::TestRequest::get()
            .uri("/slow")
            .insert_header(("Authorization", "Bearer sk_holder"));
        actix_web::rt::spawn(
            async move { test::call_service(&*app, req.to_request()).await.status() },
        )
    };
    let mut c = redis.connection();
    until("the slot taken", || card(&mut c, FLEET) == 1).await;
    // Refused by fleet_usage five times: request_rate charged and refunded each time.
    for _ in 0..5 {
        let res = test::call_service(&*app, get("sk_live_d").to_request()).await;
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    gate.add_permits(1);
    assert_eq!(holder.await.unwrap(), StatusCode::OK);
    until("the slot given back", || card(&mut c, FLEET) == 0).await;
    // The whole burst of 3 is still there.
    let mut allowed = 0;
    for _ in 0..5 {
        let status = test::call_service(&*app, get("sk_live_d").to_request())
            .await
            .status();
        if status == StatusCode::OK {
            allowed += 1;
        }
        // Each admitted request's slot must be back before the next one (one slot).
        until("the slot given back", || card(&mut c, FLEET) == 0).await;
    }
    assert_eq!(allowed, 3);
}

/// The same give-back when Redis kept the charge: five test-mode charges, charged in Redis
/// and then shed by worker_utilization in the chain (not refused by the script, which keeps
/// nothing of a request it refuses), leave the client's three credits whole.
#[actix_web::test]
async fn credits_charged_in_redis_come_back_when_the_controller_sheds() {
    let redis = RedisServer::start();
    let mut config = fleet(common::slow_bucket(3), &redis);
    config.limiters.worker_utilization.mode = Mode::Enforce;
    let rig = Rig::new(config);
    shared(&rig).await;
    let app = app!(rig, gate());
    rig.shed_all().await;
    for _ in 0..5 {
        let req = test::TestRequest::post()
            .uri("/v1/charges")
            .insert_header(("Authorization", "Bearer sk_live_shed"))
            .insert_header(("Brownout-Test-Mode", "true"));
        let res = test::call_service(&*app, req.to_request()).await;
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let req = test::TestRequest::post()
            .uri("/v1/charges")
            .insert_header(("Authorization", "Bearer sk_live_shed"));
        statuses.push(test::call_service(&*app, req.to_request()).await.status());
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

/// A sliding log's events come back from Redis when the request that recorded them is then
/// shed: five test-mode charges, each recorded in the log of three and then shed by
/// worker_utilization, leave it empty, and three charges pass after them.
#[actix_web::test]
async fn a_logs_events_recorded_in_redis_come_back_when_the_controller_sheds() {
    let redis = RedisServer::start();
    let mut config = common::slow_bucket(1_000);
    config.limiters.request_rate.quotas.push(
        QuotaConfig::new(
            "charges",
            QuotaAlgorithm::SlidingLog,
            3,
            HumanDuration::from_secs(3_600),
        )
        .with_routes(["POST /v1/charges"]),
    );
    let mut config = fleet(config, &redis);
    config.limiters.worker_utilization.mode = Mode::Enforce;
    let rig = Rig::new(config);
    shared(&rig).await;
    let app = app!(rig, gate());
    rig.shed_all().await;
    let charge = |test_mode: bool| {
        let req = test::TestRequest::post()
            .uri("/v1/charges")
            .insert_header(("Authorization", "Bearer sk_live_log"));
        if test_mode {
            req.insert_header(("Brownout-Test-Mode", "true"))
        } else {
            req
        }
    };
    let mut c = redis.connection();
    let log = || -> Option<String> {
        let mut c = redis.connection();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("brownout:*:quota:0")
            .query(&mut c)
            .unwrap();
        keys.into_iter().next()
    };
    for _ in 0..5 {
        let res = test::call_service(&*app, charge(true).to_request()).await;
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    // The give-backs reach Redis off the request path.
    until("every event given back", || {
        log().is_none_or(|key| card(&mut c, &key) == 0)
    })
    .await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let res = test::call_service(&*app, charge(false).to_request()).await;
        statuses.push(res.status());
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
    assert_eq!(card(&mut c, &log().expect("the log")), 3);
}

/// Requests for `key` alternating between two servers: how many were admitted. Every answer
/// must be 200 or 429: brownout never fails a request.
macro_rules! alternate {
    ($a:expr, $b:expr, $key:expr, $n:expr) => {{
        let key: &str = &$key;
        let mut allowed = 0;
        for i in 0..$n {
            let req = get(key).to_request();
            let status = if i % 2 == 0 {
                test::call_service(&*$a, req).await.status()
            } else {
                test::call_service(&*$b, req).await.status()
            };
            match status {
                StatusCode::OK => allowed += 1,
                StatusCode::TOO_MANY_REQUESTS => {}
                other => panic!("request {i} of {key} failed: {other}"),
            }
        }
        allowed
    }};
}

#[actix_web::test]
async fn a_redis_outage_degrades_to_local_limits_and_shared_limits_come_back() {
    let mut redis = RedisServer::start();
    let port = redis.port;
    let mut config = fleet(common::slow_bucket(5), &redis);
    config.store.timeout = HumanDuration::from_millis(50);
    let (a, b) = (Rig::new(config.clone()), Rig::new(config));
    shared(&a).await;
    shared(&b).await;
    let (app_a, app_b) = (app!(a, gate()), app!(b, gate()));
    assert_eq!(alternate!(app_a, app_b, "sk_before", 12), 5, "shared");

    redis.kill();
    // A bounded load through the outage: nothing fails; each server keeps its own buckets.
    for i in 0..6 {
        alternate!(app_a, app_b, &format!("sk_during_{i}"), 10);
    }
    assert_eq!(
        alternate!(app_a, app_a, "sk_local", 12),
        5,
        "local bucket on A"
    );
    assert_eq!(
        alternate!(app_b, app_b, "sk_local", 12),
        5,
        "local bucket on B"
    );
    let errors = "brownout_store_errors_total{store=\"redis\",op=\"decide\"}";
    assert!(a.metric(errors) >= 1.0, "errors counted");
    let failed_open = a
        .metric("brownout_fail_open_total{limiter=\"store\",reason=\"store_error\"}")
        + a.metric("brownout_fail_open_total{limiter=\"store\",reason=\"store_timeout\"}");
    assert!(failed_open >= 1.0);
    // The breaker stops calling Redis after five failures: far fewer calls than requests.
    assert!(a.metric(errors) < 40.0, "{} failed calls", a.metric(errors));
    assert_ne!(a.brownout.store_state().2, "closed");
    let base = a.admin();
    let state = common::state(&base).await;
    assert_eq!(state["store"]["limits"], "local", "{}", state["store"]);
    assert!(
        a.brownout
            .render_metrics()
            .contains("brownout_store_breaker_state{store=\"redis\"} 1")
            || a.brownout
                .render_metrics()
                .contains("brownout_store_breaker_state{store=\"redis\"} 2")
    );

    // Redis comes back (empty: no scripts, no state). Shared limits return by themselves: the
    // breaker (on the rigs' clock, moved 50 ms a round) lets a probe through once its backoff
    // (at most 1 s) is over, the connection comes back, the scripts are reloaded.
    let redis = RedisServer::on(port);
    let answered = Instant::now();
    let mut c = redis.connection();
    let mut n = 0;
    loop {
        n += 1;
        for rig in [&a, &b] {
            rig.clock.advance(Duration::from_millis(50));
        }
        alternate!(app_a, app_b, &format!("sk_probe_{n}"), 2);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("brownout:*:client")
            .query(&mut c)
            .unwrap();
        let closed = [&a, &b].map(|r| r.brownout.store_state() == ("redis", true, "closed"));
        if !keys.is_empty() && closed == [true, true] {
            break;
        }
        assert!(
            answered.elapsed() < Duration::from_secs(5),
            "shared limits did not come back"
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "shared limits back {} ms after Redis answered ({} ms of breaker time)",
        answered.elapsed().as_millis(),
        n * 50
    );
    assert!(n * 50 <= 1_500, "the breaker waited {} ms", n * 50);
    shared(&a).await;
    shared(&b).await;
    assert_eq!(alternate!(app_a, app_b, "sk_after", 12), 5, "shared again");
}

#[actix_web::test]
async fn failures_count_against_a_quota_across_servers() {
    for algorithm in [QuotaAlgorithm::SlidingWindow, QuotaAlgorithm::SlidingLog] {
        failures_across_servers(algorithm).await;
    }
}

/// Two failures, one on each server, in a quota of two counted by `algorithm` in Redis.
async fn failures_across_servers(algorithm: QuotaAlgorithm) {
    let redis = RedisServer::start();
    let mut config = common::slow_bucket(1_000);
    config.limiters.request_rate.quotas.push(
        QuotaConfig::new(
            "card_failures",
            algorithm,
            2,
            HumanDuration::from_secs(86_400),
        )
        .with_routes(["POST /v1/charges"])
        .with_count(QuotaCount::Failures),
    );
    let config = fleet(config, &redis);
    let (a, b) = (Rig::new(config.clone()), Rig::new(config));
    shared(&a).await;
    shared(&b).await;
    let (app_a, app_b) = (app!(a, gate()), app!(b, gate()));
    let charge = |decline: bool| {
        let req = test::TestRequest::post()
            .uri("/v1/charges")
            .insert_header(("Authorization", "Bearer sk_live_card_tester"));
        if decline {
            req.insert_header(("x-decline", "1")).to_request()
        } else {
            req.to_request()
        }
    };
    // Successes do not count; one declined card on each server does.
    for _ in 0..3 {
        assert_eq!(
            test::call_service(&*app_a, charge(false)).await.status(),
            StatusCode::CREATED
        );
    }
    assert_eq!(
        test::call_service(&*app_a, charge(true)).await.status(),
        StatusCode::PAYMENT_REQUIRED
    );
    assert_eq!(
        test::call_service(&*app_b, charge(true)).await.status(),
        StatusCode::PAYMENT_REQUIRED
    );
    // The failures reach Redis after the responses (off the request path).
    let mut c = redis.connection();
    until("both failures counted", || {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("brownout:*:quota:0")
            .query(&mut c)
            .unwrap();
        // A counter is "window count previous"; a log, a sorted set of its events.
        keys.len() == 1
            && if algorithm == QuotaAlgorithm::SlidingLog {
                card(&mut c, &keys[0]) == 2
            } else {
                redis::cmd("GET")
                    .arg(&keys[0])
                    .query::<String>(&mut c)
                    .unwrap()
                    .split(' ')
                    .nth(1)
                    == Some("2")
            }
    })
    .await;
    // Two failures between the servers: the third attempt is refused on either.
    for app in [&app_a, &app_b] {
        let res = test::call_service(&**app, charge(false)).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        let body: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
        assert_eq!(body["limiter"], "request_rate");
    }
}

#[actix_web::test]
async fn a_client_gone_while_redis_answers_gives_its_permits_back() {
    let redis = RedisServer::start();
    let mut config = common::slow_bucket(1_000);
    config.limiters.concurrent_requests.mode = Mode::Enforce;
    config.limiters.concurrent_requests.max_in_flight = 1;
    let fu = &mut config.limiters.fleet_usage;
    fu.mode = Mode::Enforce;
    fu.capacity = 2;
    fu.reserved_for_critical = 0.5; // one non-critical slot for the fleet
    let rig = Rig::new(fleet(config, &redis));
    shared(&rig).await;
    let app = app!(rig, gate());
    let mut c = redis.connection();
    for round in 0..20 {
        // Polled once (the script is sent), then dropped: the client went away.
        let gone = actix_web::dev::Service::call(&*app, get("sk_live_gone").to_request());
        let _ = tokio::time::timeout(Duration::ZERO, gone).await;
        until("the script to have run", || {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("brownout:*:client")
                .query(&mut c)
                .unwrap();
            !keys.is_empty()
        })
        .await;
        until("the permit and the fleet slot given back", || {
            card(&mut c, FLEET) == 0
        })
        .await;
        let status = test::call_service(&*app, get("sk_live_gone").to_request())
            .await
            .status();
        assert_eq!(status, StatusCode::OK, "round {round}");
        until("the next request's permit given back", || {
            card(&mut c, FLEET) == 0
        })
        .await;
    }
}

/// `config` in fleet mode on a Cluster.
fn on_cluster(config: Config, cluster: &Cluster) -> Config {
    let mut config = fleet(config, &cluster.nodes[0]);
    config.store.url = None;
    config.store.nodes = cluster.urls();
    config
}

fn from_ip(key: &str, ip: &str) -> test::TestRequest {
    get(key).peer_addr(format!("{ip}:4000").parse().unwrap())
}

#[actix_web::test]
async fn a_cluster_shards_clients_and_shares_their_limits() {
    let cluster = Cluster::start();
    let mut config = common::slow_bucket(3);
    config.limiters.request_rate.per_ip = PerIpConfig::new(0.001, 10).into();
    let config = on_cluster(config, &cluster);
    let (a, b) = (Rig::new(config.clone()), Rig::new(config));
    shared(&a).await;
    shared(&b).await;
    let (app_a, app_b) = (app!(a, gate()), app!(b, gate()));
    // 30 clients from 30 addresses, alternating between the servers: 3 each, not 6.
    for i in 0..30 {
        let (key, ip) = (format!("sk_live_{i}"), format!("198.51.100.{i}"));
        let mut allowed = 0;
        for n in 0..8 {
            let app = if n % 2 == 0 { &app_a } else { &app_b };
            let status = test::call_service(&**app, from_ip(&key, &ip).to_request())
                .await
                .status();
            allowed += usize::from(status == StatusCode::OK);
        }
        assert_eq!(allowed, 3, "client {i}");
    }
    // Either server reads a client's shared bucket from its node: 3 spent of 3.
    let from_b = b
        .brownout
        .read_client(
            &brownout::classify::RequestFacts::new("GET", "/v1/items")
                .with_authorization(b"Bearer sk_live_7"),
            None,
        )
        .await
        .expect("the cluster answers");
    assert_eq!(from_b.request_rate.unwrap().remaining, 0);
    // Their keys are spread over the three primaries.
    let per_node = cluster.keys_per_node();
    assert!(per_node.iter().all(|&n| n >= 5), "{per_node:?}");
    // The per-IP ceiling (under the IP's tag, on its own node) is shared too: 30 invented keys
    // from one address get its 10 credits between the two servers.
    let mut allowed = 0;
    for n in 0..30 {
        let app = if n % 2 == 0 { &app_a } else { &app_b };
        let req = from_ip(&format!("sk_invented_{n}"), "203.0.113.7");
        allowed += usize::from(
            test::call_service(&**app, req.to_request()).await.status() == StatusCode::OK,
        );
    }
    assert_eq!(allowed, 10);
    assert_eq!(
        a.metric("brownout_store_errors_total{store=\"redis\",op=\"decide\"}"),
        0.0
    );
}

#[actix_web::test]
async fn a_cluster_survives_a_primary_restart() {
    let mut cluster = Cluster::start();
    let mut config = on_cluster(common::slow_bucket(4), &cluster);
    config.store.timeout = HumanDuration::from_millis(100);
    let (a, b) = (Rig::new(config.clone()), Rig::new(config));
    shared(&a).await;
    shared(&b).await;
    let (app_a, app_b) = (app!(a, gate()), app!(b, gate()));
    assert_eq!(alternate!(app_a, app_b, "sk_before_restart", 10), 4);
    cluster.kill(1);
    // Meanwhile nothing fails: clients on the missing node's slots are decided locally.
    for i in 0..20 {
        alternate!(app_a, app_b, &format!("sk_during_restart_{i}"), 4);
    }
    cluster.restart(1);
    // Shared again for every client (on every node) once the breaker lets a probe through.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0;
    loop {
        round += 1;
        for rig in [&a, &b] {
            rig.clock.advance(Duration::from_millis(100));
        }
        let mut exact = true;
        for i in 0..12 {
            let key = format!("sk_after_restart_{round}_{i}");
            exact &= alternate!(app_a, app_b, &key, 8) == 4;
        }
        if exact {
            break;
        }
        assert!(Instant::now() < deadline, "shared limits did not come back");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("shared on every node again after {round} rounds");
}

/// A bucket of 5 at 1.5 per second (or, with `per_ip`, a per-IP ceiling of 5 at 1.5/s) on a
/// real Redis, per request or local_first: five requests at once pass, the sixth is told to
/// wait a second, and one credit later on the manual clock the client passes (local_first).
async fn five_at_one_and_a_half_per_second(sync: StoreSync, per_ip: bool) {
    let redis = RedisServer::start();
    let mut config = common::slow_bucket(5);
    let rr = &mut config.limiters.request_rate;
    if per_ip {
        (rr.rate, rr.burst) = (1000.0, 1000);
        rr.per_ip = PerIpConfig::new(1.5, 5).into();
    } else {
        rr.rate = 1.5;
    }
    let mut config = fleet(config, &redis);
    config.store.sync = sync;
    let rig = Rig::new(config);
    if sync == StoreSync::PerRequest {
        shared(&rig).await;
    }
    let app = app!(rig, gate());
    let what = format!("{sync:?}, per_ip {per_ip}");
    let key = "sk_live_five";
    for i in 0..5 {
        let res = test::call_service(&*app, get(key).to_request()).await;
        assert_eq!(res.status(), StatusCode::OK, "request {i} of 5 ({what})");
    }
    let res = test::call_service(&*app, get(key).to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{what}");
    assert_eq!(res.headers().get("retry-after").unwrap(), "1", "{what}");
    let name = if per_ip { "per_ip" } else { "request_rate" };
    assert_eq!(
        res.headers().get("ratelimit").unwrap(),
        &format!("\"{name}\";r=0;t=1"),
        "{what}"
    );
    if sync == StoreSync::LocalFirst {
        // Decided on this process's clock: one credit (666,667 µs) later it passes.
        rig.clock.advance(Duration::from_micros(666_667));
        let res = test::call_service(&*app, get(key).to_request()).await;
        assert_eq!(res.status(), StatusCode::OK, "a credit later ({what})");
    }
    assert_eq!(
        rig.metric("brownout_store_errors_total{store=\"redis\",op=\"decide\"}"),
        0.0
    );
}

#[actix_web::test]
async fn a_full_bucket_of_five_admits_five_on_redis_per_request_and_local_first() {
    for sync in [StoreSync::PerRequest, StoreSync::LocalFirst] {
        for per_ip in [false, true] {
            five_at_one_and_a_half_per_second(sync, per_ip).await;
        }
    }
}

#[actix_web::test]
async fn a_clients_shared_limits_are_read_from_redis_without_spending_them() {
    let redis = RedisServer::start();
    let mut config = fleet(common::slow_bucket(10), &redis);
    let cr = &mut config.limiters.concurrent_requests;
    (cr.mode, cr.max_in_flight) = (Mode::Enforce, 4);
    let reads = QuotaConfig::new(
        "reads",
        QuotaAlgorithm::SlidingLog,
        20,
        HumanDuration::from_secs(3_600),
    );
    let quotas = &mut config.limiters.request_rate.quotas;
    quotas.push(reads.with_routes(["GET /v1/items"]));
    let (a, b) = (Rig::new(config.clone()), Rig::new(config));
    shared(&a).await;
    shared(&b).await;
    let gate = gate();
    let app_a = app!(a, gate.clone());
    for _ in 0..3 {
        let res = test::call_service(&*app_a, get("sk_live_peek").to_request()).await;
        assert_eq!(res.status(), StatusCode::OK);
    }
    // One request still in flight on server a: a permit in Redis.
    let held = {
        let app = app_a.clone();
        actix_web::rt::spawn(async move {
            let req = test::TestRequest::get()
                .uri("/slow")
                .insert_header(("Authorization", "Bearer sk_live_peek"))
                .to_request();
            test::call_service(&*app, req).await.status()
        })
    };
    // Server b, which served none of them, reads the shared state, as often as it likes.
    let base = b.admin();
    let client = awc::Client::new();
    let mut last = serde_json::Value::Null;
    let deadline = Instant::now() + Duration::from_secs(10);
    while last["concurrent_requests"]["in_flight"] != 1 {
        assert!(Instant::now() < deadline, "the permit never showed: {last}");
        let mut res = client
            .get(format!("{base}/v1/clients/sk_live_peek"))
            .bearer_auth("test-token")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        last = res.json().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        last["request_rate"]["remaining"], 6,
        "10 less 4 spent: {last}"
    );
    assert_eq!(last["request_rate"]["burst"], 10);
    // The sliding log's three events, read from Redis, and again: nothing recorded.
    assert_eq!(last["quotas"][0]["name"], "reads");
    assert_eq!(last["quotas"][0]["remaining"], 17, "{last}");
    assert!(last["quotas"][0]["reset_seconds"].as_u64().unwrap() > 3_590);
    gate.add_permits(1);
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    // Reading spent nothing: 6 more pass, then 429.
    for i in 0..7 {
        let res = test::call_service(&*app_a, get("sk_live_peek").to_request()).await;
        let expected = if i < 6 {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(res.status(), expected, "request {i}");
    }
}

/// Starts `n` slow requests of client `key` on `app`; their statuses once they end.
macro_rules! hold {
    ($app:expr, $key:expr, $n:expr) => {
        (0..$n)
            .map(|_| {
                let app = $app.clone();
                let req = test::TestRequest::get()
                    .uri("/slow")
                    .insert_header(("Authorization", format!("Bearer {}", $key)));
                actix_web::rt::spawn(async move {
                    test::call_service(&*app, req.to_request()).await.status()
                })
            })
            .collect::<Vec<_>>()
    };
}

#[actix_web::test]
async fn permits_held_through_a_redis_crash_are_given_back_when_it_restarts() {
    // Redis persists every write before answering: what a crash does not lose.
    let dir = redis_server::TempDir::new("crash");
    let mut redis = RedisServer::persistent(dir.path());
    let port = redis.port;
    let mut config = common::slow_bucket(1_000);
    let cr = &mut config.limiters.concurrent_requests;
    (cr.mode, cr.max_in_flight) = (Mode::Enforce, 3);
    let fu = &mut config.limiters.fleet_usage;
    fu.mode = Mode::Enforce;
    fu.capacity = 6;
    fu.reserved_for_critical = 0.5; // three non-critical slots for the fleet
    let mut config = fleet(config, &redis);
    // Far longer than the test: only giving them back clears the permits.
    config.store.permit_ttl = HumanDuration::from_secs(60);
    let rig = Rig::new(config);
    shared(&rig).await;
    let gate = gate();
    let app = app!(rig, gate);
    let key = "sk_live_crash";
    // Three requests of one client hold its three permits and the fleet's three slots.
    let held = hold!(app, key, 3);
    let mut c = redis.connection();
    let client = {
        let mut client: Vec<String> = Vec::new();
        until("three permits and three slots taken", || {
            client = redis::cmd("KEYS")
                .arg("brownout:*:client")
                .query(&mut c)
                .unwrap();
            client.len() == 1 && permits(&mut c, &client[0]) == 3 && card(&mut c, FLEET) == 3
        })
        .await;
        client.remove(0)
    };
    let _: () = redis::cmd("SET")
        .arg("crash-sentinel")
        .arg("written before the crash")
        .query(&mut c)
        .unwrap();
    drop(c);

    // Redis dies (SIGKILL) while they are held; they end, and their releases fail.
    redis.kill();
    gate.add_permits(3);
    for h in held {
        assert_eq!(h.await.unwrap(), StatusCode::OK, "brownout never fails one");
    }
    let undo_errors = "brownout_store_errors_total{store=\"redis\",op=\"undo\"}";
    let deadline = Instant::now() + Duration::from_secs(5);
    while rig.metric(undo_errors) < 1.0 {
        assert!(Instant::now() < deadline, "the releases were never tried");
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }

    // Redis restarts from its file: the permits are back, and so is everything before them.
    let redis = RedisServer::persistent_on(port, dir.path());
    let mut c = redis.connection();
    let sentinel: Option<String> = redis::cmd("GET")
        .arg("crash-sentinel")
        .query(&mut c)
        .unwrap();
    assert_eq!(sentinel.as_deref(), Some("written before the crash"));
    // Within one reconnect (not the permit TTL) the failed releases are sent again.
    let back = Instant::now();
    until("the permits and slots given back after the restart", || {
        permits(&mut c, &client) == 0 && card(&mut c, FLEET) == 0
    })
    .await;
    eprintln!(
        "given back {} ms after Redis answered",
        back.elapsed().as_millis()
    );
    // The client gets its three permits on Redis again, and the fleet its three slots, once
    // requests decide on Redis again (the restarted server had to be given the scripts).
    shared(&rig).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let res = test::call_service(&*app, get("sk_live_warm").to_request()).await;
        assert_eq!(res.status(), StatusCode::OK);
        let clients: Vec<String> = redis::cmd("KEYS")
            .arg("brownout:*:client")
            .query(&mut c)
            .unwrap();
        if clients.len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "requests never decided on Redis again"
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    let held = hold!(app, key, 3);
    until("three permits and three slots taken again", || {
        permits(&mut c, &client) == 3 && card(&mut c, FLEET) == 3
    })
    .await;
    gate.add_permits(3);
    for h in held {
        assert_eq!(h.await.unwrap(), StatusCode::OK);
    }
    until("given back once more", || {
        permits(&mut c, &client) == 0 && card(&mut c, FLEET) == 0
    })
    .await;
}

/// Polls `GET /v1/state` at `base` (bounded) until `check` holds of it; the last one read.
async fn state_until(
    base: &str,
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = common::state(base).await;
        if check(&state) {
            return state;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: store {}, settings {}",
            state["store"],
            state["settings"]
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
}

#[actix_web::test]
async fn the_state_says_when_the_store_and_the_settings_link_are_down() {
    let mut redis = RedisServer::start();
    let port = redis.port;
    let rig = Rig::new(fleet(common::slow_bucket(10), &redis));
    shared(&rig).await;
    let base = rig.admin();
    let up = |s: &serde_json::Value| {
        s["store"]["connected"] == true
            && s["store"]["breaker"] == "closed"
            && s["store"]["limits"] == "shared"
            && s["settings"]["scope"] == "fleet"
            && s["settings"]["connected"] == true
    };
    state_until(&base, "both links up", up).await;

    // Redis dies; no request comes: the instance notices all the same.
    redis.kill();
    let down = state_until(&base, "both links down", |s| {
        s["store"]["connected"] == false && s["settings"]["connected"] == false
    })
    .await;
    assert_eq!(down["store"]["kind"], "redis");
    assert_eq!(down["store"]["limits"], "local", "{}", down["store"]);
    assert_eq!(down["settings"]["in_sync"], false);
    let breaker = down["store"]["breaker"].as_str().unwrap_or_default();
    assert!(
        ["closed", "open", "half_open"].contains(&breaker),
        "{breaker}"
    );

    // Requests meanwhile decide locally and open the breaker: still down, breaker open.
    let app = app!(rig, gate());
    for _ in 0..6 {
        let res = test::call_service(&*app, get("sk_live_state").to_request()).await;
        assert_eq!(res.status(), StatusCode::OK);
    }
    let open = common::state(&base).await;
    assert_eq!(open["store"]["breaker"], "open", "{}", open["store"]);
    assert_eq!(open["store"]["connected"], false);

    // Redis is back: both links come back by themselves once the breaker probes.
    let _redis = RedisServer::on(port);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        rig.clock.advance(Duration::from_millis(100));
        let _ = test::call_service(&*app, get("sk_live_state").to_request()).await;
        if up(&common::state(&base).await) {
            break;
        }
        assert!(Instant::now() < deadline, "the links did not come back");
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A client spends its whole bucket at 0.001 a second; the rate is raised to 1,000 through the
/// admin API (fleet-wide settings, in Redis). Its debt (10 credits: 10,000 s at the old rate)
/// is read at the new one (10 ms): the first request after the change is refused and carries
/// it, and a few ms later the client passes, on this server and on another.
async fn a_raised_rate_frees_a_client_within_the_new_refill(sync: StoreSync) {
    let redis = RedisServer::start();
    let mut config = fleet(common::slow_bucket(10), &redis);
    config.store.sync = sync;
    let (a, b) = (Rig::new(config.clone()), Rig::new(config));
    shared(&a).await;
    shared(&b).await;
    let (app_a, app_b) = (app!(a, gate()), app!(b, gate()));
    let what = format!("{sync:?}");
    let key = "sk_live_raised";
    for i in 0..10 {
        let res = test::call_service(&*app_a, get(key).to_request()).await;
        assert_eq!(res.status(), StatusCode::OK, "request {i} ({what})");
    }
    let res = test::call_service(&*app_a, get(key).to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{what}");
    assert_eq!(res.headers().get("retry-after").unwrap(), "1000", "{what}");
    let admin = common::AdminClient::new(&a).await;
    let patch = serde_json::json!({"limiters": {"request_rate": {"rate": 1000.0}}});
    let (status, body, _) = admin.send("PATCH", "/v1/config", Some(patch), &[]).await;
    assert_eq!(status, 200, "{body}");
    until("the other server has the new rate", || {
        b.brownout.settings().limiters.request_rate.rate == 1000.0
    })
    .await;
    // Local first decides on each server's own (manual) clock, per request on Redis's.
    let deadline = Instant::now() + Duration::from_secs(5);
    for (app, rig) in [(&app_a, &a), (&app_b, &b)] {
        let first = Instant::now();
        loop {
            let res = test::call_service(&**app, get(key).to_request()).await;
            if res.status() == StatusCode::OK {
                break;
            }
            assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "{what}");
            assert_eq!(
                res.headers().get("retry-after").unwrap(),
                "1",
                "a few ms at the new rate ({what})"
            );
            assert!(Instant::now() < deadline, "still refused ({what})");
            rig.clock.advance(Duration::from_millis(5));
            actix_web::rt::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            first.elapsed() < Duration::from_secs(1),
            "freed {:?} after the change ({what})",
            first.elapsed()
        );
    }
}

#[actix_web::test]
async fn a_raised_rate_frees_a_client_on_redis_per_request_and_local_first() {
    for sync in [StoreSync::PerRequest, StoreSync::LocalFirst] {
        a_raised_rate_frees_a_client_within_the_new_refill(sync).await;
    }
}

/// `excess: delay` in Redis: the script gives the request its turn (the TAT it wrote says how
/// long to wait), the request waits it out, and the other limiters decide it in a second round
/// trip. Three requests of a client at 20 a second with a burst of one all pass, the last two
/// after waiting (about 50 ms each, on Redis's clock).
#[actix_web::test]
async fn a_request_over_its_rate_waits_for_its_turn_in_redis() {
    let redis = RedisServer::start();
    let mut config = common::slow_bucket(1);
    let rr = &mut config.limiters.request_rate;
    rr.rate = 20.0;
    (rr.excess, rr.max_delay) = (brownout::config::Excess::Delay, HumanDuration::from_secs(1));
    let rig = Rig::new(fleet(config, &redis));
    shared(&rig).await;
    let app = app!(rig, gate());
    let started = Instant::now();
    for _ in 0..3 {
        let res = test::call_service(&*app, get("sk_live_paced").to_request()).await;
        assert_eq!(res.status(), StatusCode::OK);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(90),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        rig.metric("brownout_requests_delayed_total{tier=\"get\"}"),
        2.0
    );
    let sum = rig.metric("brownout_request_delay_seconds_sum");
    assert!((0.06..0.11).contains(&sum), "delays summed to {sum}");
}
