//! The per-user limiters through the real middleware: 429s with their headers and bodies,
//! plans, quotas, concurrency release on cancel, the fleet reserve, refunds, modes, eviction.

mod common;

use actix_web::http::StatusCode;
use actix_web::{test, web, App, HttpRequest, HttpResponse};
use brownout::classify::RequestFacts;
use brownout::config::{
    Excess, HumanDuration, PerIp, PerIpConfig, QuotaAlgorithm, QuotaConfig, QuotaCount, QuotaKey,
};
use brownout::limiter::gcra::{BucketCharge, Charge};
use brownout::limiter::window::{WindowCheck, WindowRule};
use brownout::limiter::LimiterName;
use brownout::store::{StoreError, Table};
use brownout::{Config, Mode};
use common::{header, Rig};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The base config: every limiter off but the ones a test turns on.
fn base() -> Config {
    let mut c = common::config();
    c.limiters.worker_utilization.mode = Mode::Off;
    c
}

/// A config with the request-rate limiter on: `burst` credits, `rate` per second.
fn rated(rate: f64, burst: u32) -> Config {
    let mut c = base();
    let rr = &mut c.limiters.request_rate;
    rr.mode = Mode::Enforce;
    rr.rate = rate;
    rr.burst = burst;
    // Per key only (every test request comes from one address): the ceiling's tests set it.
    rr.per_ip = PerIp::Off;
    c
}

async fn slow(gate: web::Data<Arc<Semaphore>>) -> HttpResponse {
    // Wait for the test to open the gate; the permit is consumed, one per request.
    if let Ok(permit) = gate.acquire().await {
        permit.forget();
    }
    HttpResponse::Ok().body("slow")
}

async fn charge(req: HttpRequest) -> HttpResponse {
    if req.headers().contains_key("x-decline") {
        HttpResponse::PaymentRequired().body("card declined")
    } else {
        HttpResponse::Created().body("charged")
    }
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
                    .route(
                        "/v1/accounts",
                        web::post().to(|| async { HttpResponse::Created().finish() }),
                    )
                    .route("/slow", web::get().to(slow))
                    .route("/v1/charges", web::post().to(charge)),
            )
            .await,
        )
    };
}

fn gate() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(0))
}

fn get(key: &str) -> test::TestRequest {
    test::TestRequest::get()
        .uri("/v1/items")
        .insert_header(("Authorization", format!("Bearer {key}")))
}

#[actix_web::test]
async fn request_rate_answers_429_with_exact_retry_and_ratelimit_fields() {
    let rig = Rig::new(rated(1.0, 3));
    let app = app!(rig, gate());
    for left in (0..3).rev() {
        let res = test::call_service(&*app, get("sk_live_a").to_request()).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(header(&res, "ratelimit-policy"), "\"request_rate\";q=3;w=3");
        assert_eq!(
            header(&res, "ratelimit"),
            format!("\"request_rate\";r={left};t={}", 3 - left)
        );
    }
    rig.clock.advance(Duration::from_millis(400));
    let res = test::call_service(&*app, get("sk_live_a").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // One credit regenerates in 1 s; 0.4 s have passed: 0.6 s, rounded up.
    assert_eq!(header(&res, "retry-after"), "1");
    // The draft: Retry-After must not point before the end of the effective window, so the
    // violated policy's window is the Retry-After.
    assert_eq!(header(&res, "ratelimit"), "\"request_rate\";r=0;t=1");
    assert_eq!(header(&res, "content-type"), "application/problem+json");
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["limiter"], "request_rate");
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("Retry in 1 second"));
    // Another key has its own bucket; and the first key passes once the credit exists.
    let other = test::call_service(&*app, get("sk_live_b").to_request()).await;
    assert_eq!(other.status(), StatusCode::OK);
    rig.clock.advance(Duration::from_millis(600));
    let again = test::call_service(&*app, get("sk_live_a").to_request()).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(
        rig.metric(
            "brownout_rejections_total{limiter=\"request_rate\",tier=\"get\",mode=\"enforce\"}"
        ),
        1.0
    );
}

/// Five requests at one instant against a full bucket of five, then a sixth: the first five
/// pass and the sixth is told to wait one credit (`rate` per second), rounded up to a second.
async fn burst_of_five_at_one_instant(rate: f64, per_ip: bool) {
    let mut c = rated(
        if per_ip { 1000.0 } else { rate },
        if per_ip { 1000 } else { 5 },
    );
    if per_ip {
        c.limiters.request_rate.per_ip = PerIpConfig::new(rate, 5).into();
    }
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    let (name, key) = if per_ip {
        ("per_ip", "sk_live_ceiling")
    } else {
        ("request_rate", "sk_live_five")
    };
    for left in (0..5).rev() {
        let res = test::call_service(&*app, get(key).to_request()).await;
        assert_eq!(res.status(), StatusCode::OK, "at {rate}/s, {left} left");
        if !per_ip {
            let reset = (f64::from(5 - left) / rate).ceil();
            assert_eq!(
                header(&res, "ratelimit"),
                format!("\"request_rate\";r={left};t={reset}"),
                "at {rate}/s"
            );
        }
    }
    let res = test::call_service(&*app, get(key).to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS, "at {rate}/s");
    assert_eq!(header(&res, "retry-after"), "1", "at {rate}/s");
    assert_eq!(
        header(&res, "ratelimit"),
        format!("\"{name}\";r=0;t=1"),
        "at {rate}/s"
    );
    // The same answer through `Brownout::check`, to the µs: one credit at `rate`.
    let facts =
        RequestFacts::new("GET", "/v1/items").with_authorization(b"Bearer sk_live_five_check");
    if !per_ip {
        for _ in 0..5 {
            let d = rig.brownout.check(&facts, None);
            assert!(matches!(d, brownout::Decision::Allowed(_)), "at {rate}/s");
        }
        let brownout::Decision::Rejected(r) = rig.brownout.check(&facts, None) else {
            panic!("the sixth passed at {rate}/s");
        };
        let exact = 1e6 / rate;
        let told = r.retry_after.as_secs_f64() * 1e6;
        assert!((told - exact).abs() <= 1.0, "{told} µs, not {exact} µs");
    }
    // One credit later (to the µs), the client passes.
    rig.clock
        .advance(Duration::from_micros((1e6 / rate).ceil() as u64));
    let res = test::call_service(&*app, get(key).to_request()).await;
    assert_eq!(res.status(), StatusCode::OK, "at {rate}/s, a credit later");
}

#[actix_web::test]
async fn a_full_bucket_of_five_admits_five_at_one_instant_at_any_rate() {
    // At these rates 1e6/rate rounded up, and the fifth was refused for a 2 µs deficit.
    for rate in [1.5, 6.0, 60.0, 1.0, 7.0, 100.0] {
        burst_of_five_at_one_instant(rate, false).await;
        burst_of_five_at_one_instant(rate, true).await;
    }
}

#[actix_web::test]
async fn cors_preflights_spend_no_quota_and_hold_no_slot() {
    // A bucket of 2 that practically never refills, and one request in flight per client.
    let mut c = rated(0.001, 2);
    let cr = &mut c.limiters.concurrent_requests;
    (cr.mode, cr.max_in_flight) = (Mode::Enforce, 1);
    let rig = Rig::new(c);
    let gate = gate();
    let app = app!(rig, gate);
    let preflight = || {
        test::TestRequest::default()
            .method(actix_web::http::Method::OPTIONS)
            .uri("/v1/items")
            .insert_header(("Authorization", "Bearer sk_live_cors"))
            .insert_header(("Origin", "https://app.example"))
            .insert_header(("Access-Control-Request-Method", "GET"))
    };
    // One request of the client's holds its only slot while preflights come and go.
    let held = {
        let app = app.clone();
        actix_web::rt::spawn(async move {
            let req = test::TestRequest::get()
                .uri("/slow")
                .insert_header(("Authorization", "Bearer sk_live_cors"))
                .to_request();
            test::call_service(&*app, req).await.status()
        })
    };
    actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..5 {
        let res = test::call_service(&*app, preflight().to_request()).await;
        // The app has no OPTIONS route (405 is its own answer), and brownout let it through.
        assert_ne!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            header(&res, "ratelimit"),
            "",
            "no quota shown for a preflight"
        );
    }
    gate.add_permits(1);
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    // The slow request spent one credit: one GET is left, then 429.
    let first = test::call_service(&*app, get("sk_live_cors").to_request()).await;
    assert_eq!(first.status(), StatusCode::OK);
    let second = test::call_service(&*app, get("sk_live_cors").to_request()).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[actix_web::test]
async fn an_options_request_that_is_not_a_cors_preflight_is_charged_like_any_request() {
    // A bucket of 2: OPTIONS without Origin and Access-Control-Request-Method (an app route
    // that answers OPTIONS itself, or a client dodging its limits) spends it like a GET.
    let rig = Rig::new(rated(0.001, 2));
    let app = app!(rig, gate());
    let options = |origin: bool| {
        let req = test::TestRequest::default()
            .method(actix_web::http::Method::OPTIONS)
            .uri("/v1/items")
            .insert_header(("Authorization", "Bearer sk_live_options"));
        // Origin alone is not a preflight either: the method header is missing.
        if origin {
            req.insert_header(("Origin", "https://app.example"))
        } else {
            req
        }
    };
    for origin in [false, true] {
        let res = test::call_service(&*app, options(origin).to_request()).await;
        assert_ne!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_ne!(header(&res, "ratelimit"), "", "the quota is shown");
    }
    let res = test::call_service(&*app, options(false).to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let res = test::call_service(&*app, get("sk_live_options").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[actix_web::test]
async fn with_charge_preflights_a_preflight_spends_quota_like_any_request() {
    // A bucket of 2: two preflights spend it, and the client's GET is refused.
    let mut c = rated(0.001, 2);
    c.classifier.charge_preflights = true;
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    for _ in 0..2 {
        let req = test::TestRequest::default()
            .method(actix_web::http::Method::OPTIONS)
            .uri("/v1/items")
            .insert_header(("Authorization", "Bearer sk_live_charged"))
            .to_request();
        let res = test::call_service(&*app, req).await;
        assert_ne!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_ne!(header(&res, "ratelimit"), "", "the quota is shown");
    }
    let res = test::call_service(&*app, get("sk_live_charged").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[actix_web::test]
async fn a_cors_layer_wrapped_after_brownout_adds_its_headers_to_refusals() {
    // The README's order: brownout's middleware first, the CORS layer after it (outermost),
    // so a browser app can read a 429. DefaultHeaders stands in for actix-cors here.
    let rig = Rig::new(rated(0.001, 1));
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .wrap(
                actix_web::middleware::DefaultHeaders::new()
                    .add(("Access-Control-Allow-Origin", "https://app.example")),
            )
            .route("/v1/items", web::get().to(|| async { "items" })),
    )
    .await;
    let ok = test::call_service(&app, get("sk_live_browser").to_request()).await;
    assert_eq!(ok.status(), StatusCode::OK);
    let refused = test::call_service(&app, get("sk_live_browser").to_request()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&refused, "access-control-allow-origin"),
        "https://app.example"
    );
}

#[actix_web::test]
async fn endpoint_costs_weigh_requests() {
    let mut c = rated(1.0, 10);
    c.limiters
        .request_rate
        .costs
        .insert("POST /v1/charges".into(), 4);
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    let post = || {
        test::TestRequest::post()
            .uri("/v1/charges")
            .insert_header(("Authorization", "Bearer sk_live_c"))
    };
    for _ in 0..2 {
        assert_eq!(
            test::call_service(&*app, post().to_request())
                .await
                .status(),
            StatusCode::CREATED
        );
    }
    let res = test::call_service(&*app, post().to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "2", "2 credits left, 4 needed");
    // A GET costs the default 1 credit and still fits twice.
    for _ in 0..2 {
        assert_eq!(
            test::call_service(&*app, get("sk_live_c").to_request())
                .await
                .status(),
            StatusCode::OK
        );
    }
}

/// request_rate alone (its bucket and per-IP ceiling) is charged without the ask and answer
/// every other configuration goes through; with the RateLimit fields on (which only add
/// fields) it goes that general way. Over a random schedule of clients, addresses, plans,
/// costs, modes and instants, both decide every request alike, retry times included.
#[actix_web::test]
async fn request_rate_alone_decides_every_request_as_the_whole_chain_does() {
    use brownout::classify::RequestFacts;
    use brownout::clock::ManualClock;
    use brownout::config::PlanConfig;
    use brownout::{Brownout, ClientKey, Decision};
    let ceilings = [PerIp::Off, PerIp::Limit(PerIpConfig::new(30.0, 8))];
    for (mode, per_ip) in [Mode::Enforce, Mode::Dark]
        .into_iter()
        .flat_map(|m| ceilings.map(|p| (m, p)))
    {
        let build = |headers: bool| {
            let mut c = Config::default();
            c.limiters.worker_utilization.mode = Mode::Off;
            c.limiters.adaptive_concurrency.mode = Mode::Off;
            let rr = &mut c.limiters.request_rate;
            (rr.mode, rr.rate, rr.burst, rr.per_ip) = (mode, 20.0, 5, per_ip);
            rr.headers = headers;
            rr.costs.insert("POST /v1/charges".into(), 3);
            rr.plans.insert("pro".into(), PlanConfig::new(50.0, 12));
            let clock = Arc::new(ManualClock::new());
            let b = Brownout::builder(c).clock(clock.clone()).build().unwrap();
            (b, clock)
        };
        let (alone, alone_clock) = build(false);
        let (whole, whole_clock) = build(true);
        let (mut allowed, mut refused, mut by_ip) = (0, 0, 0);
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let step = Duration::from_micros(x % 20_000);
            alone_clock.advance(step);
            whole_clock.advance(step);
            let routes = [("GET", "/v1/items"), ("POST", "/v1/charges")];
            let (method, path) = routes[(x >> 20) as usize % 2];
            let plan = [None, Some("pro")][(x >> 24) as usize % 2];
            let client = (x >> 28) % 3;
            let facts = RequestFacts::new(method, path)
                .with_client(ClientKey::from_u64(client))
                .with_peer([192, 0, 2, (client % 2) as u8].into());
            match (alone.check(&facts, plan), whole.check(&facts, plan)) {
                (Decision::Allowed(a), Decision::Allowed(b)) => {
                    assert_eq!(a.outcome, b.outcome, "request {i}");
                    allowed += 1;
                }
                (Decision::Rejected(a), Decision::Rejected(b)) => {
                    assert_eq!(a, b, "request {i}");
                    by_ip += usize::from(a.policy.is_some());
                    refused += 1;
                }
                (a, b) => {
                    panic!("request {i} ({method} {path}, {plan:?}): {a:?} alone, {b:?} whole")
                }
            }
        }
        // Both kinds of answer, many times, the ceiling's among them (dark mode refuses
        // nothing).
        let counts = format!(
            "{mode:?}, {per_ip:?}: {allowed} allowed, {refused} refused ({by_ip} by the ceiling)"
        );
        assert!(allowed > 5_000, "{counts}");
        if mode == Mode::Enforce {
            assert!(refused > 3_000, "{counts}");
            assert_eq!(by_ip > 1_000, per_ip != PerIp::Off, "{counts}");
        }
    }
}

/// request_rate alone fails open when the store fails a client's bucket, and gives back the
/// per-IP ceiling's charge made before it (a group keeps nothing of itself then): with a
/// ceiling of one credit, each request of one address at one instant still finds it full.
/// A store that panics on the bucket is let through too, counted as request_rate's panic
/// (request_rate alone runs under a guard of its own, `engine/alone.rs`); with no ceiling
/// then: a panic unwinds past the give-back, and the ceiling's credit stays spent.
#[actix_web::test]
async fn request_rate_alone_fails_open_on_a_failing_bucket_and_gives_the_ceiling_back() {
    for panic in [false, true] {
        let mut c = rated(1.0, 10);
        c.limiters.adaptive_concurrency.mode = Mode::Off;
        c.limiters.request_rate.per_ip = if panic {
            PerIp::Off
        } else {
            PerIp::Limit(PerIpConfig::new(0.001, 1))
        };
        c.limiters.request_rate.headers = false;
        let store = Arc::new(common::faulty::Faulty::large_buckets(panic));
        let rig = Rig::with(c, |b| b.store(store));
        let app = app!(rig, gate());
        for i in 0..3 {
            let key = format!("sk_live_{i}");
            let res = test::call_service(&*app, get(&key).to_request()).await;
            assert_eq!(
                res.status(),
                StatusCode::OK,
                "request {i} fails open ({panic})"
            );
        }
        let reason = if panic { "panic" } else { "store_timeout" };
        let series =
            format!("brownout_fail_open_total{{limiter=\"request_rate\",reason=\"{reason}\"}}");
        assert_eq!(rig.metric(&series), 3.0, "{series}");
        assert_eq!(
            rig.metric("brownout_requests_total{tier=\"get\",outcome=\"failed_open\"}"),
            3.0
        );
    }
}

#[actix_web::test]
async fn plans_come_from_a_trusted_header_or_the_hook() {
    let mut c = rated(1.0, 1);
    c.limiters.request_rate.plans.insert(
        "enterprise".into(),
        brownout::config::PlanConfig::new(1.0, 5),
    );
    let count_passes = |rig: &Rig, plan: Option<&'static str>, key: &'static str| {
        let rig_app = (rig.brownout.clone(),);
        async move {
            let app = test::init_service(
                App::new()
                    .wrap(rig_app.0.middleware())
                    .route("/v1/items", web::get().to(HttpResponse::Ok)),
            )
            .await;
            let mut passed = 0;
            for _ in 0..10 {
                let mut req = get(key);
                if let Some(p) = plan {
                    req = req.insert_header(("Brownout-Plan", p));
                }
                passed += usize::from(
                    test::call_service(&app, req.to_request())
                        .await
                        .status()
                        .is_success(),
                );
            }
            passed
        }
    };
    // Untrusted: the header is ignored.
    let rig = Rig::new(c.clone());
    assert_eq!(count_passes(&rig, Some("enterprise"), "k1").await, 1);
    // Trusted: the plan's burst applies; an unknown plan gets the default.
    c.classifier.trust_plan_header = true;
    let rig = Rig::new(c.clone());
    assert_eq!(count_passes(&rig, Some("enterprise"), "k2").await, 5);
    assert_eq!(count_passes(&rig, Some("nonexistent"), "k3").await, 1);
    // A hook wins over the header; a panicking hook fails open to the default plan.
    let rig = Rig::with(c, |b| {
        b.plan_hook(
            |req| match req.headers().get("authorization").map(|v| v.as_bytes()) {
                Some(b"Bearer k4") => Some(Arc::from("enterprise")),
                Some(b"Bearer k5") => panic!("hook bug"),
                _ => None,
            },
        )
    });
    assert_eq!(count_passes(&rig, None, "k4").await, 5);
    assert_eq!(count_passes(&rig, None, "k5").await, 1);
    assert!(rig.metric("brownout_fail_open_total{limiter=\"classifier\",reason=\"panic\"}") >= 1.0);
}

/// Three failed charges a day per client (a sliding window of failures on POST /v1/charges).
fn card_failures() -> QuotaConfig {
    card_failures_by(QuotaAlgorithm::SlidingWindow)
}

/// Three failed charges a day per client, counted by `algorithm`.
fn card_failures_by(algorithm: QuotaAlgorithm) -> QuotaConfig {
    QuotaConfig::new(
        "card_failures",
        algorithm,
        3,
        HumanDuration::from_secs(86_400),
    )
    .with_routes(["POST /v1/charges"])
    .with_count(QuotaCount::Failures)
}

#[actix_web::test]
async fn the_policy_lists_what_applies_to_the_request_and_each_has_its_remaining() {
    // A bucket, a per-IP ceiling and a quota on charges only.
    let mut c = rated(0.001, 10);
    c.limiters.request_rate.per_ip = PerIpConfig::new(0.001, 20).into();
    c.limiters.request_rate.quotas.push(card_failures());
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    let res = test::call_service(&*app, get("sk_live_policy").to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        "\"request_rate\";q=10;w=10000, \"per_ip\";q=20;w=20000",
        "no quota of another route"
    );
    let fields = header(&res, "ratelimit");
    assert!(
        fields.starts_with("\"request_rate\";r=9;t=") && fields.contains(", \"per_ip\";r=19;t="),
        "each policy with its remaining: {fields}"
    );
    let req = test::TestRequest::post()
        .uri("/v1/charges")
        .insert_header(("Authorization", "Bearer sk_live_policy"))
        .to_request();
    let res = test::call_service(&*app, req).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(
        header(&res, "ratelimit-policy"),
        "\"request_rate\";q=10;w=10000, \"per_ip\";q=20;w=20000, \"card_failures\";q=3;w=86400"
    );
    assert!(header(&res, "ratelimit").contains("\"card_failures\";r=3;t="));
}

#[actix_web::test]
async fn failed_card_attempts_quota_counts_only_failures() {
    for algorithm in [QuotaAlgorithm::SlidingWindow, QuotaAlgorithm::SlidingLog] {
        failed_card_attempts_by(algorithm).await;
    }
}

async fn failed_card_attempts_by(algorithm: QuotaAlgorithm) {
    let mut c = rated(100.0, 100);
    c.limiters
        .request_rate
        .quotas
        .push(card_failures_by(algorithm));
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    let charge = |decline: bool| {
        let mut r = test::TestRequest::post()
            .uri("/v1/charges")
            .insert_header(("Authorization", "Bearer sk_live_card"));
        if decline {
            r = r.insert_header(("x-decline", "1"));
        }
        r.to_request()
    };
    for _ in 0..5 {
        assert_eq!(
            test::call_service(&*app, charge(false)).await.status(),
            StatusCode::CREATED
        );
    }
    for _ in 0..3 {
        let res = test::call_service(&*app, charge(true)).await;
        assert_eq!(res.status(), StatusCode::PAYMENT_REQUIRED);
        assert!(
            header(&res, "ratelimit").contains("\"card_failures\";r="),
            "{}",
            header(&res, "ratelimit")
        );
    }
    let res = test::call_service(&*app, charge(false)).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&res, "ratelimit-policy").contains("\"card_failures\";q=3;w=86400"));
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
    assert_eq!(body["quota"], "card_failures");
    // Other routes are not affected.
    assert_eq!(
        test::call_service(&*app, get("sk_live_card").to_request())
            .await
            .status(),
        StatusCode::OK
    );
}

/// A sliding log is exact where the counters estimate: three a minute, sent at 0 s, 30 s and
/// 50 s, refuse a fourth until 60 s (when the first leaves), then again until 90 s; the
/// RateLimit field says what is left and when the oldest event leaves, and Retry-After when
/// one more fits.
#[actix_web::test]
async fn a_sliding_log_quota_is_exact_and_its_fields_follow_the_oldest_event() {
    let mut c = rated(100.0, 100);
    c.limiters.request_rate.quotas.push(
        QuotaConfig::new(
            "exports",
            QuotaAlgorithm::SlidingLog,
            3,
            HumanDuration::from_secs(60),
        )
        .with_routes(["POST /v1/accounts"]),
    );
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    let export = || {
        test::TestRequest::post()
            .uri("/v1/accounts")
            .insert_header(("Authorization", "Bearer sk_live_exports"))
            .to_request()
    };
    let field = |all: String| {
        let at = all.find("\"exports\"").expect("the quota is shown");
        all[at..].split(',').next().unwrap_or_default().to_owned()
    };
    let mut seen = Vec::new();
    for (wait, status) in [
        (0, StatusCode::CREATED),
        (30, StatusCode::CREATED),
        (20, StatusCode::CREATED),
        (9, StatusCode::TOO_MANY_REQUESTS),
        (1, StatusCode::CREATED),
        (29, StatusCode::TOO_MANY_REQUESTS),
        (1, StatusCode::CREATED),
    ] {
        rig.clock.advance(Duration::from_secs(wait));
        let res = test::call_service(&*app, export()).await;
        assert_eq!(res.status(), status, "after {seen:?}");
        seen.push((
            field(header(&res, "ratelimit")),
            header(&res, "retry-after"),
        ));
    }
    let first = |i: usize| seen[i].0.clone();
    assert_eq!(first(0), "\"exports\";r=2;t=60");
    assert_eq!(
        first(2),
        "\"exports\";r=0;t=10",
        "the oldest leaves at 60 s"
    );
    assert_eq!(
        (first(3).as_str(), seen[3].1.as_str()),
        ("\"exports\";r=0;t=1", "1")
    );
    assert_eq!(
        first(4),
        "\"exports\";r=0;t=30",
        "the event of 30 s is now the oldest"
    );
    assert_eq!(
        seen[5].1, "1",
        "a fourth fits at 90 s, when the event of 30 s leaves"
    );
}

#[actix_web::test]
async fn per_ip_quota_with_fixed_window_resets_at_the_boundary() {
    let mut c = rated(100.0, 100);
    c.limiters.request_rate.quotas.push(
        QuotaConfig::new(
            "signups",
            QuotaAlgorithm::FixedWindow,
            2,
            HumanDuration::from_secs(60),
        )
        .with_routes(["POST /v1/accounts"])
        .with_key(QuotaKey::Ip),
    );
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    // Different API keys, one IP: the quota is per IP.
    let signup = |key: &str| {
        test::TestRequest::post()
            .uri("/v1/accounts")
            .peer_addr("203.0.113.5:4000".parse().unwrap())
            .insert_header(("Authorization", format!("Bearer {key}")))
            .to_request()
    };
    assert_eq!(
        test::call_service(&*app, signup("a")).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        test::call_service(&*app, signup("b")).await.status(),
        StatusCode::CREATED
    );
    let res = test::call_service(&*app, signup("c")).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "60");
    rig.clock.advance(Duration::from_secs(60));
    assert_eq!(
        test::call_service(&*app, signup("d")).await.status(),
        StatusCode::CREATED
    );
}

/// Starts a request that waits at the gate; evaluates to its task.
macro_rules! hold {
    ($app:expr, $key:expr) => {{
        let app = $app.clone();
        let req = test::TestRequest::get()
            .uri("/slow")
            .insert_header(("Authorization", format!("Bearer {}", $key)))
            .to_request();
        actix_web::rt::spawn(async move { test::call_service(&*app, req).await.status() })
    }};
}

/// Lets spawned requests run until `n` are in flight.
async fn until_in_flight(rig: &Rig, n: i64) {
    for _ in 0..1000 {
        if rig.brownout.in_flight().get == n {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "expected {n} requests in flight, have {}",
        rig.brownout.in_flight().get
    );
}

fn concurrent(max: u32) -> Config {
    let mut c = base();
    c.limiters.concurrent_requests.mode = Mode::Enforce;
    c.limiters.concurrent_requests.max_in_flight = max;
    c
}

#[actix_web::test]
async fn concurrency_cap_per_key_and_release() {
    let rig = Rig::new(concurrent(2));
    let gate = gate();
    let app = app!(rig, gate);
    let held = [hold!(app, "sk_live_x"), hold!(app, "sk_live_x")];
    until_in_flight(&rig, 2).await;
    let res = test::call_service(&*app, get("sk_live_x").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "1");
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
    assert_eq!(body["limiter"], "concurrent_requests");
    // Another key is not affected.
    assert_eq!(
        test::call_service(&*app, get("sk_live_y").to_request())
            .await
            .status(),
        StatusCode::OK
    );
    gate.add_permits(2);
    for h in held {
        assert_eq!(h.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(
        test::call_service(&*app, get("sk_live_x").to_request())
            .await
            .status(),
        StatusCode::OK
    );
}

#[actix_web::test]
async fn a_cancelled_request_gives_its_permit_back() {
    let rig = Rig::new(concurrent(1));
    let gate = gate();
    let app = app!(rig, gate);
    let held = hold!(app, "sk_live_z");
    until_in_flight(&rig, 1).await;
    assert_eq!(
        test::call_service(&*app, get("sk_live_z").to_request())
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // The client goes away: the request's future is dropped mid-flight.
    held.abort();
    assert!(held.await.unwrap_err().is_cancelled());
    until_in_flight(&rig, 0).await;
    assert_eq!(
        test::call_service(&*app, get("sk_live_z").to_request())
            .await
            .status(),
        StatusCode::OK
    );
}

#[actix_web::test]
async fn fleet_reserve_keeps_room_for_critical_requests() {
    let mut c = base();
    let fu = &mut c.limiters.fleet_usage;
    fu.mode = Mode::Enforce;
    fu.capacity = 5;
    fu.reserved_for_critical = 0.2; // 4 slots for non-critical traffic
    let rig = Rig::new(c);
    let gate = gate();
    let app = app!(rig, gate);
    let held: Vec<_> = (0..4).map(|i| hold!(app, format!("k{i}"))).collect();
    until_in_flight(&rig, 4).await;
    let res = test::call_service(&*app, get("k9").to_request()).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
    assert_eq!(body["limiter"], "fleet_usage");
    let post = test::TestRequest::post().uri("/v1/items").to_request();
    assert_eq!(
        test::call_service(&*app, post).await.status().as_u16(),
        503,
        "post is not critical"
    );
    let charge = test::TestRequest::post().uri("/v1/charges").to_request();
    assert_eq!(
        test::call_service(&*app, charge).await.status(),
        StatusCode::CREATED,
        "critical uses the reserve"
    );
    gate.add_permits(4);
    for h in held {
        assert_eq!(h.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(
        test::call_service(&*app, get("k9").to_request())
            .await
            .status(),
        StatusCode::OK
    );
}

#[actix_web::test]
async fn a_later_rejection_refunds_the_credits() {
    let mut c = concurrent(1);
    let rr = &mut c.limiters.request_rate;
    rr.mode = Mode::Enforce;
    rr.rate = 0.001; // no meaningful regeneration during the test
    rr.burst = 3;
    let rig = Rig::new(c);
    let gate = gate();
    let app = app!(rig, gate);
    let held = hold!(app, "sk_live_r"); // spends 1 credit
    until_in_flight(&rig, 1).await;
    // Each of these is charged by request_rate, then refused by concurrent_requests: refunded.
    for _ in 0..5 {
        let res = test::call_service(&*app, get("sk_live_r").to_request()).await;
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&res, "retry-after"), "1");
        // The bucket's window (1000 s) ends after Retry-After: not reported on this answer.
        assert_eq!(header(&res, "ratelimit"), "");
    }
    gate.add_permits(1);
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    // Two credits are left, not zero.
    for _ in 0..2 {
        assert_eq!(
            test::call_service(&*app, get("sk_live_r").to_request())
                .await
                .status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        test::call_service(&*app, get("sk_live_r").to_request())
            .await
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[actix_web::test]
async fn dark_mode_counts_keeps_state_and_adds_no_headers() {
    let mut c = rated(0.001, 2);
    c.limiters.request_rate.mode = Mode::Dark;
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    for _ in 0..5 {
        let res = test::call_service(&*app, get("sk_live_d").to_request()).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert!(res.headers().get("ratelimit").is_none());
    }
    // As if enforced: 2 passed, 3 would have been rejected (and were not charged).
    assert_eq!(
        rig.metric(
            "brownout_rejections_total{limiter=\"request_rate\",tier=\"get\",mode=\"dark\"}"
        ),
        3.0
    );
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"get\",outcome=\"dark_rejected\"}"),
        3.0
    );
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"get\",outcome=\"allowed\"}"),
        2.0
    );
}

#[actix_web::test]
async fn off_mode_and_kill_switch_free_fleet_and_concurrency_too() {
    let mut c = concurrent(1);
    c.limiters.concurrent_requests.mode = Mode::Off;
    let rig = Rig::new(c);
    let gate = gate();
    let app = app!(rig, gate);
    let held = hold!(app, "sk_live_o");
    until_in_flight(&rig, 1).await;
    assert_eq!(
        test::call_service(&*app, get("sk_live_o").to_request())
            .await
            .status(),
        StatusCode::OK
    );
    gate.add_permits(1);
    held.await.unwrap();
}

#[actix_web::test]
async fn idle_keys_are_evicted_and_a_key_flood_is_capped() {
    let mut c = rated(10.0, 5);
    c.limiters.request_rate.max_keys = 64;
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    for i in 0..10 {
        test::call_service(&*app, get(&format!("k{i}")).to_request()).await;
    }
    assert_eq!(
        rig.brownout.tracked_keys(LimiterName::RequestRate).unwrap(),
        10
    );
    assert_eq!(
        rig.metric("brownout_tracked_keys{limiter=\"request_rate\"}"),
        10.0
    );
    // 0.1 s later each bucket (1 credit spent, 10/s) is full again: the same as no state.
    rig.clock.advance(Duration::from_millis(100));
    rig.brownout.evict_idle();
    assert_eq!(
        rig.brownout.tracked_keys(LimiterName::RequestRate).unwrap(),
        0
    );
    // A flood of 1,000 new keys never holds more than the table's 64 slots.
    for i in 0..1000 {
        let res = test::call_service(&*app, get(&format!("flood{i}")).to_request()).await;
        assert_eq!(
            res.status(),
            StatusCode::OK,
            "new keys are never refused for lack of room"
        );
    }
    assert!(rig.brownout.tracked_keys(LimiterName::RequestRate).unwrap() <= 64);
}

#[actix_web::test]
async fn a_failing_or_panicking_store_fails_open_and_is_counted() {
    for panic in [false, true] {
        let mut c = concurrent(1);
        c.limiters.request_rate.mode = Mode::Enforce;
        let store = Arc::new(common::faulty::Faulty::new(panic));
        let rig = Rig::with(c, |b| b.store(store));
        let app = app!(rig, gate());
        for _ in 0..3 {
            let res = test::call_service(&*app, get("sk_live_f").to_request()).await;
            assert_eq!(res.status(), StatusCode::OK, "fails open (panic: {panic})");
        }
        let reason = if panic { "panic" } else { "store_timeout" };
        let series = format!(
            "brownout_fail_open_total{{limiter=\"concurrent_requests\",reason=\"{reason}\"}}"
        );
        assert_eq!(rig.metric(&series), 3.0, "{series}");
        assert_eq!(
            rig.metric("brownout_requests_total{tier=\"get\",outcome=\"failed_open\"}"),
            3.0
        );
        // The limiter before it did its work: three credits were spent.
        assert!(rig.metric("brownout_tracked_keys{limiter=\"request_rate\"}") >= 1.0);
    }
}

/// A store of one's own that keeps counted slots (concurrency permits) only: every other
/// operation answers an error (the trait has no defaults, so it says so itself), and the
/// limiters that ask them fail open.
struct PermitsOnly(brownout::store::MemoryStore);

fn no_buckets<T>() -> Result<T, StoreError> {
    Err(StoreError::Failed(
        "this store keeps no buckets or windows".into(),
    ))
}

impl brownout::store::Store for PermitsOnly {
    fn peek(&self, table: Table, key: u64) -> Result<Option<u64>, StoreError> {
        if table == LimiterName::ConcurrentRequests.table(0) {
            return self.0.peek(table, key);
        }
        no_buckets()
    }
    fn gcra(&self, _: Table, _: u64, _: u64, _: BucketCharge) -> Result<Charge, StoreError> {
        no_buckets()
    }
    fn gcra_refund(&self, _: Table, _: u64, _: u64) -> Result<(), StoreError> {
        no_buckets()
    }
    fn window(
        &self,
        _: Table,
        _: u64,
        _: u64,
        _: &WindowRule,
        _: bool,
    ) -> Result<WindowCheck, StoreError> {
        no_buckets()
    }
    fn window_refund(&self, _: Table, _: u64, _: u64, _: &WindowRule) -> Result<(), StoreError> {
        no_buckets()
    }
    fn slot_take(&self, table: Table, key: u64, max: u64) -> Result<bool, StoreError> {
        self.0.slot_take(table, key, max)
    }
    fn slot_give(&self, table: Table, key: u64) {
        self.0.slot_give(table, key);
    }
    fn evict_idle(&self, now: u64, unix_now: u64, windows: &[(Table, WindowRule)]) {
        self.0.evict_idle(now, unix_now, windows);
    }
    fn tracked_keys(&self, table: Table) -> Option<usize> {
        (table == LimiterName::ConcurrentRequests.table(0))
            .then(|| self.0.tracked_keys(table))
            .flatten()
    }
}

#[actix_web::test]
async fn a_store_that_refuses_some_operations_runs_the_rest_and_fails_open_on_those() {
    let mut c = concurrent(1);
    c.limiters.request_rate.mode = Mode::Enforce;
    let store = Arc::new(PermitsOnly(brownout::store::MemoryStore::for_limiters(
        &Config::default().limiters,
    )));
    let rig = Rig::with(c, |b| b.store(store));
    let gate = gate();
    let app = app!(rig, gate);
    // Its permits work: one in flight, the second is refused.
    let held = hold!(app, "sk_live_p");
    until_in_flight(&rig, 1).await;
    let second = test::call_service(&*app, get("sk_live_p").to_request()).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    gate.add_permits(1);
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    // The bucket it does not keep: request_rate fails open, counted, and tracks nothing.
    let series = "brownout_fail_open_total{limiter=\"request_rate\",reason=\"store_error\"}";
    assert_eq!(rig.metric(series), 2.0, "{series}");
    assert_eq!(rig.brownout.tracked_keys(LimiterName::RequestRate), None);
}

/// `excess: delay`, the leaky bucket as a queue, through the middleware: at 20 a second with
/// a burst of one, a second request waits its 50 ms turn (holding no slot meanwhile) and
/// passes; a request whose wait is dropped (as a tower server drops it when its client hangs
/// up) gives its turn back, so the next request waits 100 ms and not 150; past `max_delay` a request is refused. (The rig's clock stands
/// still: every turn is measured from one instant, while the waits are real.)
#[actix_web::test]
#[allow(clippy::disallowed_methods)] // the wait is real: it is timed
async fn a_request_over_its_rate_waits_for_its_turn_and_one_that_gives_up_gives_it_back() {
    let mut c = rated(20.0, 1);
    let rr = &mut c.limiters.request_rate;
    (rr.excess, rr.max_delay) = (Excess::Delay, HumanDuration::from_millis(120));
    let cr = &mut c.limiters.concurrent_requests;
    (cr.mode, cr.max_in_flight) = (Mode::Enforce, 1);
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    macro_rules! call {
        () => {{
            let app = Rc::clone(&app);
            actix_web::rt::spawn(async move {
                let res = test::call_service(&*app, get("sk_live_paced").to_request()).await;
                (res.status(), header(&res, "ratelimit"))
            })
        }};
    }
    assert_eq!(call!().await.unwrap().0, StatusCode::OK);
    let started = Instant::now();
    let waiting = call!();
    actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        rig.brownout.in_flight().get,
        0,
        "a request waiting its turn is not in flight"
    );
    let (status, fields) = waiting.await.unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "one permit each: nothing was held while it waited"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(45),
        "{:?}",
        started.elapsed()
    );
    assert!(fields.starts_with("\"request_rate\";r=0;t="), "{fields}");
    // The third request's turn is 100 ms away; its client gives up after 10 ms.
    let gave_up = actix_web::rt::time::timeout(
        Duration::from_millis(10),
        test::call_service(&*app, get("sk_live_paced").to_request()),
    )
    .await;
    assert!(gave_up.is_err(), "still waiting when its client hung up");
    // Its turn came back: the next waits 100 ms again (the delays' sum is 50 + 100 + 100).
    assert_eq!(call!().await.unwrap().0, StatusCode::OK);
    let sum = rig.metric("brownout_request_delay_seconds_sum");
    assert!((sum - 0.25).abs() < 1e-6, "delays summed to {sum}");
    assert_eq!(
        rig.metric("brownout_requests_delayed_total{tier=\"get\"}"),
        3.0
    );
    // The next turn is 150 ms away, past max_delay: refused, told when to come back.
    let res = test::call_service(&*app, get("sk_live_paced").to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&res, "retry-after"), "1");
}

/// A request refused after its wait gives its turn back: here worker_utilization sheds it
/// once its turn has come (test traffic, with every sheddable tier shed), so the next
/// request's turn is as far away as its own was (the delays sum to 50 + 50 ms, not 50 +
/// 100). A critical charge spent the burst first.
#[actix_web::test]
async fn a_request_refused_after_its_wait_gives_its_turn_back() {
    let mut c = rated(20.0, 1);
    let rr = &mut c.limiters.request_rate;
    (rr.excess, rr.max_delay) = (Excess::Delay, HumanDuration::from_secs(1));
    c.limiters.worker_utilization.mode = Mode::Enforce;
    let rig = Rig::new(c);
    let app = app!(rig, gate());
    rig.shed_all().await;
    let charge = |test_mode: &str| {
        test::TestRequest::post()
            .uri("/v1/charges")
            .insert_header(("Authorization", "Bearer sk_live_turn"))
            .insert_header(("Brownout-Test-Mode", test_mode))
            .to_request()
    };
    let res = test::call_service(&*app, charge("false")).await;
    assert_eq!(res.status(), StatusCode::CREATED, "critical: never shed");
    for _ in 0..2 {
        let res = test::call_service(&*app, charge("true")).await;
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
        assert_eq!(body["limiter"], "worker_utilization");
    }
    let sum = rig.metric("brownout_request_delay_seconds_sum");
    assert!((sum - 0.1).abs() < 1e-6, "delays summed to {sum}");
}
