//! The tower layer (`Brownout::layer`) on a real axum server on loopback, driven by a real HTTP
//! client: the same refusals as the actix middleware (status, `Retry-After`, RateLimit fields,
//! problem+json), gRPC refusals in gRPC's words, tiers, a kill switch flipped over the admin
//! API, a limiter's slot held by a body streamed after the response head and freed when it
//! ends or when the client hangs up, and the route learned from axum's `MatchedPath`.

mod common;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use common::{AdminClient as Admin, AdminOn, Rig};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

/// Serves `app` on a loopback port, with the peer address axum's `ConnectInfo` gives.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    format!("http://{addr}")
}

fn client() -> awc::Client {
    awc::Client::builder()
        .timeout(Duration::from_secs(5))
        .finish()
}

fn header(res: &awc::ClientResponse<impl Sized>, name: &str) -> Option<String> {
    res.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

#[actix_web::test]
async fn refusals_say_what_the_actix_middleware_says() {
    let rig = Rig::new(common::slow_bucket(2));
    let base = serve(
        Router::new()
            .route("/v1/items", get(|| async { "ok" }))
            .layer(rig.brownout.layer()),
    )
    .await;
    let c = client();
    let send = || {
        c.get(format!("{base}/v1/items"))
            .insert_header(("Authorization", "Bearer sk_live_tower"))
            .send()
    };
    for left in [1, 0] {
        let res = send().await.unwrap();
        assert_eq!(res.status(), 200);
        let field = header(&res, "ratelimit").expect("the RateLimit field");
        assert!(field.contains(&format!("r={left}")), "{field}");
        assert!(header(&res, "ratelimit-policy").is_some());
    }
    let mut res = send().await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(
        header(&res, "content-type").as_deref(),
        Some("application/problem+json")
    );
    let retry: u64 = header(&res, "retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1);
    assert!(header(&res, "ratelimit").unwrap().contains("r=0"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["limiter"], "request_rate");
    assert_eq!(body["tier"], "get");
    assert_eq!(body["retry_after_seconds"], retry);
    assert_eq!(
        rig.metric(r#"brownout_requests_total{tier="get",outcome="rejected"}"#),
        1.0
    );
}

#[actix_web::test]
async fn a_grpc_call_is_refused_in_grpcs_words() {
    let rig = Rig::new(common::slow_bucket(1));
    let base = serve(
        Router::new()
            .route(
                "/pkg.Payments/Charge",
                axum::routing::post(|| async { ([("grpc-status", "0")], "") }),
            )
            .layer(rig.brownout.layer()),
    )
    .await;
    let c = client();
    let call = || {
        c.post(format!("{base}/pkg.Payments/Charge"))
            .insert_header(("Authorization", "Bearer sk_live_grpc"))
            .insert_header(("content-type", "application/grpc"))
            .send()
    };
    assert_eq!(call().await.unwrap().status(), 200);
    let mut res = call().await.unwrap();
    assert_eq!(res.status(), 200, "gRPC refusals are trailers-only");
    assert_eq!(header(&res, "grpc-status").as_deref(), Some("8"));
    let retry: u64 = header(&res, "retry-after").unwrap().parse().unwrap();
    assert_eq!(
        header(&res, "grpc-retry-pushback-ms"),
        Some((retry * 1000).to_string())
    );
    let message = header(&res, "grpc-message").unwrap();
    assert!(message.contains("request_rate"), "{message}");
    assert!(res.body().await.unwrap().is_empty());
}

#[actix_web::test]
async fn tiers_and_the_kill_switch_work_as_in_actix() {
    let rig = Rig::new(common::config());
    rig.shed_all().await;
    let base = serve(
        Router::new()
            .route("/v1/items", get(|| async { "ok" }))
            .route("/v1/charges", axum::routing::post(|| async { "charged" }))
            .layer(rig.brownout.layer()),
    )
    .await;
    let c = client();
    let items = || c.get(format!("{base}/v1/items")).send();
    let charge = || c.post(format!("{base}/v1/charges")).send();
    // Everything sheddable is shed; critical requests are not.
    let res = items().await.unwrap();
    assert_eq!(res.status(), 503);
    assert!(header(&res, "retry-after").is_some());
    assert_eq!(charge().await.unwrap().status(), 200);

    // An axum app serves the admin API without actix: hyper.
    let admin = Admin::on(&rig, AdminOn::Hyper);
    let engage = |on: bool| {
        let admin = &admin;
        async move {
            let (status, _, _) = admin
                .send("PUT", "/v1/kill-switch", Some(json!({"engaged": on})), &[])
                .await;
            assert_eq!(status, 200);
        }
    };
    engage(true).await;
    assert_eq!(items().await.unwrap().status(), 200, "every limiter off");
    engage(false).await;
    assert_eq!(items().await.unwrap().status(), 503);
}

/// A handler whose body sends one chunk at once and the last once `release` is notified.
fn streaming(
    release: std::sync::Arc<tokio::sync::Notify>,
) -> impl Fn() -> std::future::Ready<Body> + Clone + Send + 'static {
    move || {
        let chunks =
            futures_util::stream::unfold((0, release.clone()), |(step, release)| async move {
                match step {
                    0 => Some((Ok::<_, std::io::Error>("first,"), (1, release))),
                    1 => {
                        release.notified().await;
                        Some((Ok("last"), (2, release)))
                    }
                    _ => None,
                }
            });
        std::future::ready(Body::from_stream(chunks))
    }
}

#[actix_web::test]
async fn a_streamed_body_holds_its_slot_until_it_ends_or_the_client_hangs_up() {
    let mut config = common::config();
    config.limiters.worker_utilization.mode = brownout::Mode::Off;
    let cr = &mut config.limiters.concurrent_requests;
    cr.mode = brownout::Mode::Enforce;
    cr.max_in_flight = 1;
    let rig = Rig::new(config);
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let base = serve(
        Router::new()
            .route("/v1/export", get(streaming(release.clone())))
            .route("/v1/items", get(|| async { "ok" }))
            .layer(rig.brownout.layer()),
    )
    .await;
    let c = client();
    let key = ("Authorization", "Bearer sk_live_stream");
    let items = || c.get(format!("{base}/v1/items")).insert_header(key).send();

    // The export's head is back, its body still streaming: its slot is held.
    let mut export = c
        .get(format!("{base}/v1/export"))
        .insert_header(key)
        .send()
        .await
        .unwrap();
    assert_eq!(export.status(), 200);
    let mut res = items().await.unwrap();
    assert_eq!(
        res.status(),
        429,
        "the streamed body holds the key's one slot"
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["limiter"], "concurrent_requests");
    // The body ends: the slot is free.
    release.notify_one();
    assert_eq!(&export.body().await.unwrap()[..], b"first,last");
    assert_eq!(items().await.unwrap().status(), 200);

    // A client that hangs up mid-stream gives the slot back too.
    let export = c
        .get(format!("{base}/v1/export"))
        .insert_header(key)
        .send()
        .await
        .unwrap();
    assert_eq!(items().await.unwrap().status(), 429);
    drop(export);
    let freed = common::eventually(|| async { items().await.unwrap().status() == 200 }).await;
    assert!(freed, "the slot came back when the client hung up");
}

#[actix_web::test]
async fn the_route_is_learned_from_axums_matched_path() {
    let rig = Rig::new(common::config());
    let base = serve(
        Router::new()
            .route("/v1/items/{id}", get(|| async { "item" }))
            .layer(rig.brownout.layer()),
    )
    .await;
    let c = client();
    for id in 0..20 {
        let res = c.get(format!("{base}/v1/items/{id}")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        // A method the route has no handler for: axum's 405 teaches no route.
        let res = c
            .post(format!("{base}/v1/items/{id}"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 405);
    }
    // The window closes (manual clock; the sampler runs in real time): the class is learned.
    rig.clock.advance(Duration::from_millis(300));
    let admin = rig.admin_on(AdminOn::Hyper);
    let mut routes = Vec::new();
    for _ in 0..300 {
        let s = common::state(&admin).await;
        routes = s["adaptive_concurrency"]["route_classes"]
            .as_array()
            .expect("route_classes")
            .iter()
            .filter_map(|c| c["route"].as_str().map(str::to_owned))
            // The router's own refusals are learned as `unmatched`, as in actix.
            .filter(|r| r != "unmatched")
            .collect();
        if !routes.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        routes,
        ["GET /v1/items/{id}"],
        "one class, not one per id, and none for the refused method"
    );
}

/// `limiters.deadline` at 50 ms over one concurrency slot per key, with `cancel` as given.
fn deadline(cancel: bool) -> brownout::Config {
    let mut config = common::config();
    config.limiters.worker_utilization.mode = brownout::Mode::Off;
    let cr = &mut config.limiters.concurrent_requests;
    cr.mode = brownout::Mode::Enforce;
    cr.max_in_flight = 1;
    config.limiters.deadline.after = brownout::config::HumanDuration::from_millis(50);
    config.limiters.deadline.cancel = cancel;
    config
}

/// An axum app whose `/v1/slow` (GET, and the gRPC method `POST /pkg.Reports/Run`) waits for
/// `gate`, setting `stopped` if its handler is dropped first; `/v1/items` answers at once.
fn slow_app(
    rig: &Rig,
    gate: std::sync::Arc<tokio::sync::Notify>,
    stopped: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Router {
    struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let slow = move || {
        let (gate, stopped) = (gate.clone(), stopped.clone());
        async move {
            let flag = Flag(stopped);
            gate.notified().await;
            std::mem::forget(flag);
            ([("grpc-status", "0")], "done")
        }
    };
    Router::new()
        .route("/v1/slow", get(slow.clone()))
        .route("/pkg.Reports/Run", axum::routing::post(slow))
        .route("/v1/items", get(|| async { "ok" }))
        .layer(rig.brownout.layer())
}

/// [`slow_app`] served for `rig`: its gate, whether its handler was stopped, and its address.
async fn serve_slow(
    rig: &Rig,
) -> (
    std::sync::Arc<tokio::sync::Notify>,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    String,
) {
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let stopped = std::sync::Arc::<std::sync::atomic::AtomicBool>::default();
    let base = serve(slow_app(rig, gate.clone(), stopped.clone())).await;
    (gate, stopped, base)
}

/// Waits `ms` for `answer`, which must not come by then.
async fn unanswered_for<F: std::future::Future + Unpin>(answer: &mut F, ms: u64) {
    tokio::select! {
        _ = answer => panic!("answered before the gate opened"),
        () = tokio::time::sleep(Duration::from_millis(ms)) => {}
    }
}

#[actix_web::test]
async fn a_request_past_its_deadline_stops_counting_and_runs_on() {
    let rig = Rig::new(deadline(false));
    let (gate, stopped, base) = serve_slow(&rig).await;
    let c = client();
    let key = ("Authorization", "Bearer sk_live_deadline");
    let slow = c.get(format!("{base}/v1/slow")).insert_header(key).send();
    tokio::pin!(slow);
    unanswered_for(&mut slow, 300).await;
    assert_eq!(
        rig.metric(r#"brownout_expired_requests_total{tier="get"}"#),
        1.0
    );
    // Its slot went back: the same key (one request at a time) gets in.
    let items = c.get(format!("{base}/v1/items")).insert_header(key);
    assert_eq!(items.send().await.unwrap().status(), 200);
    // The handler went on, and its answer reaches the client.
    gate.notify_one();
    let mut late = slow.await.unwrap();
    assert_eq!(late.status(), 200);
    assert_eq!(&late.body().await.unwrap()[..], b"done");
    assert!(!stopped.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(rig.brownout.in_flight().get, 0, "released once, not twice");
}

#[actix_web::test]
async fn with_cancel_a_request_is_stopped_and_answered_503_or_deadline_exceeded() {
    let rig = Rig::new(deadline(true));
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let stopped = std::sync::Arc::<std::sync::atomic::AtomicBool>::default();
    let base = serve(slow_app(&rig, gate, stopped.clone())).await;
    let c = client();
    let mut res = c.get(format!("{base}/v1/slow")).send().await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(header(&res, "retry-after").as_deref(), Some("1"));
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["limiter"], "deadline");
    assert_eq!(body["tier"], "get");
    // gRPC: DEADLINE_EXCEEDED, trailers-only, with the pushback.
    let res = c
        .post(format!("{base}/pkg.Reports/Run"))
        .insert_header(("content-type", "application/grpc"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "grpc-status").as_deref(), Some("4"));
    assert_eq!(
        header(&res, "grpc-retry-pushback-ms").as_deref(),
        Some("1000")
    );
    assert!(header(&res, "grpc-message").unwrap().contains("deadline"));
    let stopped_now =
        common::eventually(|| async { stopped.load(std::sync::atomic::Ordering::SeqCst) }).await;
    assert!(stopped_now, "the handlers were stopped");
    assert_eq!(
        rig.metric(r#"brownout_expired_requests_total{tier="get"}"#),
        1.0
    );
    assert_eq!(rig.brownout.in_flight().get, 0);
    // A request answered in time is untouched.
    let res = c.get(format!("{base}/v1/items")).send().await.unwrap();
    assert_eq!(res.status(), 200);
}

#[actix_web::test]
async fn with_nothing_counting_in_flight_a_request_that_holds_nothing_passes_straight_through() {
    // request_rate alone, its fields off: no permit, no field, nothing reading in-flight.
    let mut config = deadline(false);
    config.limiters.concurrent_requests.mode = brownout::Mode::Off;
    config.limiters.adaptive_concurrency.mode = brownout::Mode::Off;
    config.limiters.request_rate.mode = brownout::Mode::Enforce;
    config.limiters.request_rate.headers = false;
    let rig = Rig::new(config);
    let (gate, stopped, base) = serve_slow(&rig).await;
    let slow = client().get(format!("{base}/v1/slow")).send();
    tokio::pin!(slow);
    unanswered_for(&mut slow, 150).await;
    assert_eq!(rig.brownout.in_flight().get, 0, "not counted");
    assert_eq!(
        rig.metric(r#"brownout_expired_requests_total{tier="get"}"#),
        0.0,
        "past its deadline, it had nothing to give back"
    );
    gate.notify_one();
    let mut answered = slow.await.unwrap();
    assert_eq!(answered.status(), 200);
    assert_eq!(&answered.body().await.unwrap()[..], b"done");
    assert!(!stopped.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(
        rig.metric(r#"brownout_requests_total{tier="get",outcome="allowed"}"#),
        1.0
    );
}

/// The customer an earlier layer verified (here a fixed one, as `axum::Extension` inserts it).
#[derive(Clone)]
struct Customer(&'static str);

#[actix_web::test]
async fn the_apps_hooks_run_in_the_layer_as_in_the_middleware() {
    // The key hook counts the customer an outer layer verified, whatever bearer key is sent.
    let rig = Rig::with(common::slow_bucket(1), |b| {
        b.key_hook(|req| {
            let customer = req.extensions().get::<Customer>().cloned()?;
            Some(brownout::ClientKey::new(customer.0))
        })
    });
    let base = serve(
        Router::new()
            .route("/v1/items", get(|| async { "ok" }))
            .layer(rig.brownout.layer())
            .layer(axum::Extension(Customer("cus_42"))),
    )
    .await;
    let c = client();
    let send = |key: &'static str| {
        c.get(format!("{base}/v1/items"))
            .insert_header(("Authorization", key))
            .send()
    };
    assert_eq!(send("Bearer sk_live_a").await.unwrap().status(), 200);
    let refused = send("Bearer sk_live_b").await.unwrap();
    assert_eq!(refused.status(), 429, "one customer, one bucket");

    // The tier hook promotes a route to critical; a panicking one fails open, counted.
    let rig = Rig::with(common::config(), |b| {
        b.tier_hook(|req| match req.path() {
            "/v1/health" => Some(brownout::Tier::Critical),
            "/v1/boom" => panic!("hook bug"),
            _ => None,
        })
    });
    rig.shed_all().await;
    let base = serve(
        Router::new()
            .route("/v1/health", get(|| async { "ok" }))
            .route("/v1/boom", get(|| async { "ok" }))
            .route("/v1/items", get(|| async { "ok" }))
            .layer(rig.brownout.layer()),
    )
    .await;
    let get_path = |path: &'static str| c.get(format!("{base}{path}")).send();
    assert_eq!(get_path("/v1/health").await.unwrap().status(), 200);
    assert_eq!(get_path("/v1/items").await.unwrap().status(), 503);
    assert_eq!(
        get_path("/v1/boom").await.unwrap().status(),
        503,
        "the built-in rules: a shed GET"
    );
    assert_eq!(
        rig.metric(r#"brownout_fail_open_total{limiter="classifier",reason="panic"}"#),
        1.0
    );
}

/// `excess: delay` through the layer as through the middleware: at 20 a second with a burst
/// of one, the second and third requests of a client wait their turns (50 and 100 ms, the
/// delays' sum), and a fourth, whose turn is past `max_delay`, is refused.
#[actix_web::test]
#[allow(clippy::disallowed_methods)] // the wait is real: it is timed
async fn a_request_over_its_rate_waits_for_its_turn_in_the_layer() {
    let mut config = common::slow_bucket(1);
    let rr = &mut config.limiters.request_rate;
    rr.rate = 20.0;
    (rr.excess, rr.max_delay) = (
        brownout::config::Excess::Delay,
        brownout::config::HumanDuration::from_millis(120),
    );
    let rig = Rig::new(config);
    let base = serve(
        Router::new()
            .route("/v1/items", get(|| async { "ok" }))
            .layer(rig.brownout.layer()),
    )
    .await;
    let c = client();
    let send = || {
        c.get(format!("{base}/v1/items"))
            .insert_header(("Authorization", "Bearer sk_live_paced_tower"))
            .send()
    };
    let started = std::time::Instant::now();
    for _ in 0..3 {
        assert_eq!(send().await.unwrap().status(), 200);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(140),
        "{:?}",
        started.elapsed()
    );
    let sum = rig.metric("brownout_request_delay_seconds_sum");
    assert!((sum - 0.15).abs() < 1e-6, "delays summed to {sum}");
    let res = send().await.unwrap();
    assert_eq!(res.status(), 429);
}
