//! A hostile client against the real middleware on a real server: path spellings, invented API
//! keys, forged X-Forwarded-For lines, and the answers it gets (calendar windows, RateLimit
//! fields that agree with Retry-After).
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod common;

use actix_web::http::StatusCode;
use actix_web::{test, web, App, HttpMessage, HttpResponse, HttpServer};
use brownout::clock::ManualClock;
use brownout::config::{HumanDuration, PerIpConfig, QuotaAlgorithm, QuotaConfig, QuotaKey};
use brownout::{Brownout, ClientKey, Config, Mode};
use common::{raw_http, Rig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A response header's value ("" when absent).
fn h<B>(res: &actix_web::dev::ServiceResponse<B>, name: &str) -> String {
    res.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Request rate on (100 credits, no regeneration to speak of), two critical routes that cost 5,
/// and a quota counting every POST /v1/charges.
fn guarded() -> Config {
    let mut c = common::slow_bucket(100);
    c.classifier.critical = vec!["POST /v1/charges".into(), "POST /v1/tokens".into()];
    let rr = &mut c.limiters.request_rate;
    rr.costs.insert("POST /v1/charges".into(), 5);
    rr.costs.insert("POST /v1/tokens".into(), 5);
    rr.quotas.push(
        QuotaConfig::new(
            "charges",
            QuotaAlgorithm::FixedWindow,
            1000,
            HumanDuration::from_secs(86_400),
        )
        .with_routes(["POST /v1/charges"]),
    );
    c
}

/// The charges, tokens and items handlers.
fn handlers(cfg: &mut web::ServiceConfig) {
    cfg.route("/v1/charges", web::post().to(|| async { "charges" }))
        .route("/v1/tokens", web::post().to(|| async { "tokens" }))
        .route("/v1/items", web::get().to(|| async { "items" }));
}

/// Serves `routes` behind `brownout` on a loopback port, one worker.
fn serve(brownout: &Brownout, routes: fn(&mut web::ServiceConfig)) -> SocketAddr {
    let b = brownout.clone();
    let server = HttpServer::new(move || App::new().wrap(b.middleware()).configure(routes))
        .workers(1)
        .disable_signals()
        .bind("127.0.0.1:0")
        .unwrap();
    let addr = server.addrs()[0];
    actix_web::rt::spawn(server.run());
    addr
}

#[actix_web::test]
async fn paths_are_classified_as_the_router_routes_them() {
    let rig = Rig::new(guarded());
    let addr = serve(&rig.brownout, handlers);
    // (request target, the handler actix routes it to)
    let cases = [
        ("/v1/charges", Some("charges")),
        ("/v1/%63harges", Some("charges")),
        ("/%761/charges", Some("charges")),
        ("/v1/%63%68%61%72%67%65%73", Some("charges")),
        ("/v1/charges?via=query", Some("charges")),
        // The URI parser drops a fragment: actix routes what is left.
        ("/v1/charges#frag", Some("charges")),
        ("/v1/t%6Fkens", Some("tokens")),
        ("/v1/t%6fkens", Some("tokens")),
        ("/v1%2Fcharges", None),
        ("/v1%2fcharges", None),
        ("/v1/charges/", None),
        ("//v1/charges", None),
        ("/v1//charges", None),
        ("/v1/./charges", None),
        ("/v1/x/../charges", None),
        ("/v1/%2E/charges", None),
        ("/v1/charges%23frag", None),
    ];
    let critical = "brownout_requests_total{tier=\"critical\",outcome=\"allowed\"}";
    for (i, (target, handler)) in cases.into_iter().enumerate() {
        let before = rig.metric(critical);
        let res = raw_http(
            addr,
            format!(
                "POST {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_live_{i}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        )
        .await;
        let ratelimit = res.header("ratelimit").unwrap_or_default().to_owned();
        match handler {
            Some(name) => {
                assert_eq!((res.status, res.body.as_str()), (200, name), "{target}");
                assert_eq!(
                    rig.metric(critical),
                    before + 1.0,
                    "{target}: critical tier"
                );
                assert!(
                    ratelimit.starts_with("\"request_rate\";r=95;"),
                    "{target}: cost 5, {ratelimit}"
                );
                assert_eq!(
                    ratelimit.contains("\"charges\""),
                    name == "charges",
                    "{target}: counted by the quota exactly when routed to charges: {ratelimit}"
                );
            }
            None => {
                assert_eq!(res.status, 404, "{target}");
                assert_eq!(rig.metric(critical), before, "{target}: not critical");
                assert!(
                    ratelimit.starts_with("\"request_rate\";r=99;"),
                    "{target}: default cost, {ratelimit}"
                );
                assert!(!ratelimit.contains("\"charges\""), "{target}: {ratelimit}");
            }
        }
    }
}

/// Methods are case-sensitive (RFC 9110 §9.1), and so is actix's routing: `post
/// /v1/charges` is answered 404, so it is neither critical, nor charged the route's cost, nor
/// counted by the route's quota (three such requests used to spend a victim's quota).
#[actix_web::test]
async fn methods_are_matched_with_their_case_as_the_router_matches_them() {
    let rig = Rig::new(guarded());
    let addr = serve(&rig.brownout, handlers);
    let critical = "brownout_requests_total{tier=\"critical\",outcome=\"allowed\"}";
    for (i, method) in ["post", "Post", "pOST", "POst", "posT", "POST"]
        .into_iter()
        .enumerate()
    {
        let before = rig.metric(critical);
        let res = raw_http(
            addr,
            format!(
                "{method} /v1/charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_live_m{i}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        )
        .await;
        let ratelimit = res.header("ratelimit").unwrap_or_default().to_owned();
        if method == "POST" {
            assert_eq!((res.status, res.body.as_str()), (200, "charges"));
            assert_eq!(rig.metric(critical), before + 1.0);
            assert!(
                ratelimit.starts_with("\"request_rate\";r=95;"),
                "{ratelimit}"
            );
            assert!(ratelimit.contains("\"charges\""), "{ratelimit}");
        } else {
            assert_eq!(res.status, 404, "{method}");
            assert_eq!(rig.metric(critical), before, "{method}: not critical");
            assert!(
                ratelimit.starts_with("\"request_rate\";r=99;"),
                "{method}: the default cost, {ratelimit}"
            );
            assert!(!ratelimit.contains("\"charges\""), "{method}: {ratelimit}");
        }
    }
}

/// The shipped config.yaml on a manual clock (nothing regenerates during the test).
fn shipped() -> (Brownout, Arc<ManualClock>) {
    let config = Config::load_with_sections(
        concat!(env!("CARGO_MANIFEST_DIR"), "/config.yaml"),
        &["demo"],
    )
    .unwrap();
    let clock = Arc::new(ManualClock::new());
    let b = Brownout::builder(config)
        .clock(clock.clone())
        .seed(3)
        .admin_token("a-test-token-of-some-length")
        .build()
        .unwrap();
    (b, clock)
}

#[actix_web::test]
async fn invented_api_keys_from_one_ip_are_mostly_refused_by_the_per_ip_ceiling() {
    let (brownout, _clock) = shipped();
    let app = test::init_service(
        App::new()
            .wrap(brownout.middleware())
            .route("/v1/items", web::get().to(|| async { "items" })),
    )
    .await;
    let peer: SocketAddr = "203.0.113.9:4000".parse().unwrap();
    let (mut allowed, mut refused) = (0, 0);
    for i in 0..5_000 {
        let req = test::TestRequest::get()
            .uri("/v1/items")
            .peer_addr(peer)
            .insert_header(("Authorization", format!("Bearer sk_live_invented_{i}")))
            .to_request();
        let res = test::call_service(&app, req).await;
        match res.status() {
            StatusCode::OK => allowed += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                refused += 1;
                if refused == 1 {
                    let retry = h(&res, "retry-after").to_owned();
                    assert_eq!(h(&res, "ratelimit"), format!("\"per_ip\";r=0;t={retry}"));
                    let body: serde_json::Value =
                        serde_json::from_slice(&test::read_body(res).await).unwrap();
                    assert_eq!(body["policy"], "per_ip", "{body}");
                }
            }
            other => panic!("unexpected {other}"),
        }
    }
    // The ceiling is 500 credits: every request past it is refused, whatever key it carries.
    assert_eq!((allowed, refused), (500, 4_500));
    // Another address still gets in.
    let other = test::TestRequest::get()
        .uri("/v1/items")
        .peer_addr("198.51.100.1:4000".parse().unwrap())
        .insert_header(("Authorization", "Bearer sk_live_honest"))
        .to_request();
    assert_eq!(
        test::call_service(&app, other).await.status(),
        StatusCode::OK
    );
}

/// What an authentication layer would have put in the request.
#[derive(Clone)]
struct Customer(String);

#[actix_web::test]
async fn the_key_hook_counts_the_verified_customer_whatever_key_is_sent() {
    let c = common::slow_bucket(3);
    let rig = Rig::with(c, |b| {
        b.key_hook(|req| {
            let customer = req.extensions().get::<Customer>().cloned()?;
            assert_ne!(customer.0, "panic", "a buggy hook");
            Some(ClientKey::new(&customer.0))
        })
    });
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/v1/items", web::get().to(HttpResponse::Ok)),
    )
    .await;
    let call = |customer: Option<&str>, key: String| {
        let req = test::TestRequest::get()
            .uri("/v1/items")
            .insert_header(("Authorization", format!("Bearer {key}")))
            .to_request();
        if let Some(c) = customer {
            req.extensions_mut().insert(Customer(c.to_owned()));
        }
        test::call_service(&app, req)
    };
    // cus_1 sends a fresh key each time: its own 3 credits, then 429.
    for i in 0..3 {
        assert_eq!(
            call(Some("cus_1"), format!("k{i}")).await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        call(Some("cus_1"), "k9".into()).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another customer, even with cus_1's last key, has its own bucket.
    assert_eq!(
        call(Some("cus_2"), "k0".into()).await.status(),
        StatusCode::OK
    );
    // No customer: the built-in rule (the bearer key).
    assert_eq!(call(None, "k0".into()).await.status(), StatusCode::OK);
    // A panicking hook fails open to the built-in rule, counted.
    assert_eq!(
        call(Some("panic"), "k1".into()).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        rig.metric("brownout_fail_open_total{limiter=\"classifier\",reason=\"panic\"}"),
        1.0
    );
}

#[actix_web::test]
async fn forwarded_for_lines_are_joined_and_the_proxys_entry_keys_the_client() {
    let mut c = common::slow_bucket(2);
    c.classifier.trust_forwarded_for = true;
    let rig = Rig::new(c);
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/v1/items", web::get().to(HttpResponse::Ok)),
    )
    .await;
    // The client writes its own line each time; the proxy appends the real address on another.
    let call = |lines: [&'static str; 2]| {
        let req = test::TestRequest::get()
            .uri("/v1/items")
            .peer_addr("10.0.0.2:80".parse().unwrap())
            .append_header(("X-Forwarded-For", lines[0]))
            .append_header(("X-Forwarded-For", lines[1]))
            .to_request();
        test::call_service(&app, req)
    };
    assert_eq!(
        call(["1.1.1.1", "203.0.113.7"]).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        call(["2.2.2.2", "203.0.113.7"]).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        call(["3.3.3.3, 4.4.4.4", "203.0.113.7"]).await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the client's own line does not give it a new key"
    );
    assert_eq!(
        call(["203.0.113.7", "198.51.100.4"]).await.status(),
        StatusCode::OK,
        "another client"
    );
}

#[actix_web::test]
async fn quota_windows_follow_the_calendar_and_the_answer_agrees_with_retry_after() {
    let mut c = common::config();
    c.limiters.worker_utilization.mode = Mode::Off;
    let rr = &mut c.limiters.request_rate;
    rr.mode = Mode::Enforce;
    rr.quotas.push(
        QuotaConfig::new(
            "signups",
            QuotaAlgorithm::FixedWindow,
            1,
            HumanDuration::from_secs(86_400),
        )
        .with_key(QuotaKey::Ip),
    );
    rr.per_ip = PerIpConfig::new(100.0, 1000).into();
    let rig = Rig::new(c);
    // The process started at 23:59:50 UTC: the day's window ends in 10 s, not in 24 h.
    let day = 20_000 * 86_400;
    rig.clock.set_unix_origin(Duration::from_secs(day - 10));
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/v1/items", web::get().to(HttpResponse::Ok)),
    )
    .await;
    let get = || {
        test::call_service(
            &app,
            test::TestRequest::get()
                .uri("/v1/items")
                .peer_addr("203.0.113.1:1".parse().unwrap())
                .to_request(),
        )
    };
    let ok = get().await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(
        h(&ok, "ratelimit"),
        "\"request_rate\";r=499;t=1, \"per_ip\";r=999;t=1, \"signups\";r=0;t=10"
    );
    assert_eq!(
        h(&ok, "ratelimit-policy"),
        "\"request_rate\";q=500;w=5, \"per_ip\";q=1000;w=10, \"signups\";q=1;w=86400"
    );
    let refused = get().await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(h(&refused, "retry-after"), "10");
    assert_eq!(h(&refused, "ratelimit"), "\"signups\";r=0;t=10");
    rig.clock.advance(Duration::from_secs(10));
    assert_eq!(get().await.status(), StatusCode::OK, "a new UTC day");
}

#[actix_web::test]
async fn permits_of_aborted_requests_are_released_and_their_keys_forgotten() {
    let mut c = common::config();
    c.limiters.worker_utilization.mode = Mode::Off;
    c.limiters.concurrent_requests.mode = Mode::Enforce;
    // No sweep during the test: releasing the last permit must free the key by itself.
    c.limiters.request_rate.eviction_interval = HumanDuration::from_secs(3600);
    let rig = Rig::new(c);
    let addr = serve(&rig.brownout, |cfg| {
        cfg.route(
            "/slow",
            web::get().to(|| async {
                // actix finishes a handler whose client went away; the permit goes with it.
                tokio::time::sleep(Duration::from_millis(200)).await;
                HttpResponse::Ok().finish()
            }),
        );
    });
    // 300 clients each send a request and hang up before the answer.
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        for i in 0..300 {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let req = format!(
                "GET /slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k{}\r\n\r\n",
                i % 7
            );
            s.write_all(req.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
    })
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let concurrency = rig
            .brownout
            .tracked_keys(brownout::limiter::LimiterName::ConcurrentRequests)
            .unwrap();
        let text = rig.brownout.render_metrics();
        let gauge = common::metric(
            &text,
            "brownout_tracked_keys{limiter=\"concurrent_requests\"}",
        );
        if concurrency == 0 && gauge == 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still tracking {concurrency} keys ({gauge} in the gauge)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let in_flight = rig.brownout.in_flight();
    assert!(brownout::Tier::ALL.iter().all(|&t| in_flight.get(t) == 0));
}
