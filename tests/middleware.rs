//! The middleware on a real actix app: tiers, modes, rejections, fail-open, in-flight tracking.

mod common;

use actix_web::http::StatusCode;
use actix_web::{test, web, App, HttpResponse};
use brownout::config::Selection;
use brownout::Mode;
use common::{charge, config, get, post, Rig};
use std::time::Duration;

macro_rules! app {
    ($rig:expr) => {
        test::init_service(
            App::new()
                .wrap($rig.brownout.middleware())
                .route(
                    "/v1/items",
                    web::get().to(|| async { HttpResponse::Ok().body("items") }),
                )
                .route(
                    "/v1/items",
                    web::post().to(|| async { HttpResponse::Created().finish() }),
                )
                .route(
                    "/v1/charges",
                    web::post().to(|| async { HttpResponse::Created().finish() }),
                ),
        )
        .await
    };
}

fn test_mode() -> test::TestRequest {
    get().insert_header(("Authorization", "Bearer sk_test_123"))
}

#[actix_web::test]
async fn idle_server_serves_every_tier_and_counts_it() {
    let rig = Rig::new(config());
    let app = app!(rig);
    for (req, tier) in [
        (get(), "get"),
        (post(), "post"),
        (charge(), "critical"),
        (test_mode(), "test"),
    ] {
        let res = test::call_service(&app, req.to_request()).await;
        assert!(res.status().is_success(), "{tier}: {}", res.status());
        let series = format!("brownout_requests_total{{tier=\"{tier}\",outcome=\"allowed\"}}");
        assert_eq!(rig.metric(&series), 1.0, "{series}");
    }
}

#[actix_web::test]
async fn full_shedding_rejects_every_tier_but_critical() {
    let rig = Rig::new(config());
    let app = app!(rig);
    rig.shed_all().await;
    for req in [get(), post(), test_mode()] {
        let res = test::call_service(&app, req.to_request()).await;
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    let res = test::call_service(&app, charge().to_request()).await;
    assert_eq!(res.status(), StatusCode::CREATED, "critical is never shed");
    assert_eq!(
        rig.metric("brownout_rejections_total{limiter=\"worker_utilization\",tier=\"get\",mode=\"enforce\"}"),
        1.0
    );
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"post\",outcome=\"rejected\"}"),
        1.0
    );
    assert_eq!(rig.metric("brownout_shedding_amount"), 1.0);
    assert_eq!(rig.metric("brownout_shed_probability{tier=\"test\"}"), 1.0);
}

#[actix_web::test]
async fn half_way_sheds_test_all_get_some_post_none() {
    let rig = Rig::new(config());
    let app = app!(rig);
    // From rest (-28/120): +28/120 per 28 s step at u = 1, then 4 s more reaches 0.5.
    for _ in 0..3 {
        rig.step(1.0, Duration::from_secs(28)).await;
    }
    let amount = rig.step(1.0, Duration::from_secs(4)).await;
    assert!((amount - 0.5).abs() < 1e-9, "{amount}");
    let count_503 = |n: usize, make: fn() -> test::TestRequest| {
        let app = &app;
        async move {
            let mut rejected = 0;
            for _ in 0..n {
                let res = test::call_service(app, make().to_request()).await;
                rejected += usize::from(res.status() == StatusCode::SERVICE_UNAVAILABLE);
            }
            rejected
        }
    };
    assert_eq!(count_503(50, test_mode).await, 50);
    assert_eq!(count_503(50, post).await, 0);
    assert_eq!(count_503(50, charge).await, 0);
    let gets = count_503(400, get).await;
    assert!(
        (120..=280).contains(&gets),
        "about half of 400 GETs shed, got {gets}"
    );
}

#[actix_web::test]
async fn rejection_has_retry_after_and_a_problem_body() {
    let rig = Rig::new(config());
    let app = app!(rig);
    rig.shed_all().await;
    let res = test::call_service(&app, get().to_request()).await;
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    let headers = res.headers().clone();
    assert_eq!(headers.get("retry-after").unwrap(), "3");
    assert_eq!(
        headers.get("content-type").unwrap(),
        "application/problem+json"
    );
    let body: serde_json::Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
    assert_eq!(body["status"], 503);
    assert_eq!(body["limiter"], "worker_utilization");
    assert_eq!(body["tier"], "get");
    assert_eq!(body["retry_after_seconds"], 3);
    assert!(body["type"]
        .as_str()
        .unwrap()
        .starts_with("urn:brownout:problem:"));
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("Retry in 3 seconds") && detail.contains("get"),
        "{detail}"
    );
}

#[actix_web::test]
async fn dark_mode_counts_but_lets_everything_through() {
    let mut c = config();
    c.limiters.worker_utilization.mode = Mode::Dark;
    let rig = Rig::new(c);
    let app = app!(rig);
    rig.shed_all().await;
    for req in [get(), post(), test_mode()] {
        let res = test::call_service(&app, req.to_request()).await;
        assert!(res.status().is_success());
        assert!(res.headers().get("retry-after").is_none());
    }
    assert_eq!(
        rig.metric(
            "brownout_rejections_total{limiter=\"worker_utilization\",tier=\"get\",mode=\"dark\"}"
        ),
        1.0
    );
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"test\",outcome=\"dark_rejected\"}"),
        1.0
    );
    assert_eq!(
        rig.metric("brownout_limiter_mode{limiter=\"worker_utilization\",mode=\"dark\"}"),
        1.0
    );
    assert_eq!(
        rig.metric("brownout_limiter_mode{limiter=\"worker_utilization\",mode=\"enforce\"}"),
        0.0
    );
}

#[actix_web::test]
async fn off_mode_evaluates_nothing() {
    let mut c = config();
    c.limiters.worker_utilization.mode = Mode::Off;
    let rig = Rig::new(c);
    let app = app!(rig);
    // Off, the controller stays at rest whatever the load (as long as it would take to shed
    // everything were it on).
    for _ in 0..6 {
        assert!(rig.step(1.0, Duration::from_secs(28)).await < 0.0);
    }
    let res = test::call_service(&app, test_mode().to_request()).await;
    assert!(res.status().is_success());
    assert_eq!(
        rig.metric(
            "brownout_rejections_total{limiter=\"worker_utilization\",tier=\"test\",mode=\"dark\"}"
        ),
        0.0
    );
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"test\",outcome=\"allowed\"}"),
        1.0
    );
}

#[actix_web::test]
async fn a_stale_plan_fails_open_and_is_counted() {
    let rig = Rig::new(config());
    let app = app!(rig);
    rig.shed_all().await;
    // The controller goes silent (as if it died) for longer than three sample intervals.
    rig.clock.advance(Duration::from_secs(3 * 3600 + 1));
    let res = test::call_service(&app, get().to_request()).await;
    assert!(res.status().is_success(), "fails open: {}", res.status());
    assert_eq!(
        rig.metric(
            "brownout_fail_open_total{limiter=\"worker_utilization\",reason=\"stale_plan\"}"
        ),
        1.0
    );
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"get\",outcome=\"failed_open\"}"),
        1.0
    );
}

#[actix_web::test]
async fn a_panicking_tier_hook_fails_open_to_the_built_in_rules() {
    let rig = Rig::with(config(), |b| {
        b.tier_hook(|req| {
            if req.path() == "/v1/items" && req.method() == "POST" {
                panic!("hook bug");
            }
            None
        })
    });
    let app = app!(rig);
    let res = test::call_service(&app, post().to_request()).await;
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(
        rig.metric("brownout_fail_open_total{limiter=\"classifier\",reason=\"panic\"}"),
        1.0
    );
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"post\",outcome=\"allowed\"}"),
        1.0
    );
}

#[actix_web::test]
async fn a_tier_hook_can_promote_a_route_to_critical() {
    let rig = Rig::with(config(), |b| {
        b.tier_hook(|req| (req.path() == "/v1/items").then_some(brownout::Tier::Critical))
    });
    let app = app!(rig);
    rig.shed_all().await;
    let res = test::call_service(&app, get().to_request()).await;
    assert_eq!(res.status(), StatusCode::OK);
}

#[actix_web::test]
async fn a_failing_source_is_counted_and_the_plan_goes_stale() {
    struct Flaky(u32);
    impl brownout::UtilizationSource for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }
        fn sample(&mut self, _: Duration) -> Result<f64, brownout::control::SourceError> {
            self.0 += 1;
            match self.0 {
                1..=6 => Ok(1.0),
                7 => panic!("gauge bug"),
                _ => Err(brownout::control::SourceError("pool gone".into())),
            }
        }
    }
    let rig = Rig::with(config(), |b| b.custom_source(Flaky(0)));
    let app = app!(rig);
    for _ in 0..6 {
        rig.clock.advance(Duration::from_secs(28));
        rig.brownout.sample_now().await.unwrap();
    }
    assert_eq!(rig.brownout.plan().amount, 1.0);
    for _ in 0..2 {
        rig.clock.advance(Duration::from_secs(28));
        // The sampler survives the panic and the error; the plan is not refreshed.
        let plan = rig.brownout.sample_now().await.unwrap();
        assert_eq!(plan.samples, 6);
    }
    assert_eq!(
        rig.metric(
            "brownout_fail_open_total{limiter=\"worker_utilization\",reason=\"source_panic\"}"
        ),
        1.0
    );
    assert_eq!(
        rig.metric(
            "brownout_fail_open_total{limiter=\"worker_utilization\",reason=\"source_error\"}"
        ),
        1.0
    );
    rig.clock.advance(Duration::from_secs(3 * 3600));
    let res = test::call_service(&app, get().to_request()).await;
    assert!(res.status().is_success());
}

#[actix_web::test]
async fn cohort_selection_is_consistent_per_client() {
    let mut c = config();
    c.limiters.worker_utilization.selection = Selection::Cohort;
    let rig = Rig::new(c);
    let app = app!(rig);
    for _ in 0..3 {
        rig.step(1.0, Duration::from_secs(28)).await;
    }
    rig.step(1.0, Duration::from_secs(4)).await; // get tier at p = 0.5
    let mut shed_clients = 0;
    for client in 0..40 {
        let key = format!("Bearer sk_live_{client}");
        let mut statuses = Vec::new();
        for _ in 0..5 {
            let req = get()
                .insert_header(("Authorization", key.clone()))
                .to_request();
            statuses.push(test::call_service(&app, req).await.status());
        }
        assert!(
            statuses.windows(2).all(|w| w[0] == w[1]),
            "client {client}: {statuses:?}"
        );
        shed_clients += usize::from(statuses[0] == StatusCode::SERVICE_UNAVAILABLE);
    }
    assert!(
        (8..=32).contains(&shed_clients),
        "{shed_clients} of 40 clients shed"
    );
}

#[actix_web::test]
async fn in_flight_is_released_when_the_body_ends_and_when_the_client_cancels() {
    let rig = Rig::new(config());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let gate = std::sync::Arc::new(tokio::sync::Mutex::new(Some(rx)));
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/fast", web::get().to(|| async { "ok" }))
            .route(
                "/slow",
                web::get().to(move || {
                    let gate = gate.clone();
                    async move {
                        if let Some(rx) = gate.lock().await.take() {
                            let _ = rx.await;
                        }
                        "late"
                    }
                }),
            ),
    )
    .await;
    let res = test::call_service(&app, test::TestRequest::get().uri("/fast").to_request()).await;
    assert_eq!(rig.brownout.in_flight().get, 1, "the body is not read yet");
    assert_eq!(test::read_body(res).await, "ok");
    assert_eq!(
        rig.brownout.in_flight().get,
        0,
        "released at the end of the body"
    );

    // A client that goes away: the response future is dropped mid-flight.
    let pending = test::call_service(&app, test::TestRequest::get().uri("/slow").to_request());
    let cancelled = tokio::time::timeout(Duration::from_millis(20), pending).await;
    assert!(cancelled.is_err(), "the handler was still waiting");
    assert_eq!(rig.brownout.in_flight().get, 0, "released on cancel");
    drop(tx);
}

/// The guards alone (worker_utilization and adaptive_concurrency with no per-key limiter on,
/// decided apart from the general chain: `engine/guards.rs`) decide every request as the
/// chain does. The same app twice, once with the two guards alone and once beside a
/// concurrent_requests limit that never binds (which sends every request through the
/// chain), is driven to shed half the GETs by cohort and given one schedule of clients,
/// tiers and finishes that fills the fast guard's limit: every answer (status and
/// `Retry-After`) and every count of the outcomes and refusals is alike, in each mix of
/// modes and under the kill switch.
#[actix_web::test]
async fn the_guards_alone_decide_every_request_as_the_whole_chain_does() {
    use std::collections::VecDeque;
    let modes = [
        (Mode::Enforce, Mode::Enforce, false),
        (Mode::Dark, Mode::Enforce, false),
        (Mode::Enforce, Mode::Dark, false),
        (Mode::Enforce, Mode::Enforce, true),
    ];
    for (wu, ac, killed) in modes {
        let build = |chain: bool| {
            let mut c = config();
            c.limiters.worker_utilization.mode = wu;
            c.limiters.worker_utilization.selection = Selection::Cohort;
            let a = &mut c.limiters.adaptive_concurrency;
            (a.mode, a.initial_limit, a.min_limit, a.queue) = (ac, 6, 2, 0);
            if chain {
                let cr = &mut c.limiters.concurrent_requests;
                (cr.mode, cr.max_in_flight) = (Mode::Enforce, 1_000_000);
            }
            Rig::new(c)
        };
        let (alone, whole) = (build(false), build(true));
        for rig in [&alone, &whole] {
            // From rest to an amount of 0.5 (as `half_way_sheds_test_all_get_some_post_none`).
            for _ in 0..3 {
                rig.step(1.0, Duration::from_secs(28)).await;
            }
            rig.step(1.0, Duration::from_secs(4)).await;
            if killed {
                let change = brownout::ops::Change::KillSwitch(true);
                rig.brownout.change(change, "test").await.unwrap();
            }
        }
        let (app_alone, app_whole) = (app!(alone), app!(whole));
        let (mut held_alone, mut held_whole) = (VecDeque::new(), VecDeque::new());
        let mut answers = std::collections::BTreeMap::<u16, usize>::new();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(3) && !held_alone.is_empty() {
                // A request finishes (the same one on both apps).
                let at = (x >> 8) as usize % held_alone.len();
                drop(held_alone.remove(at));
                drop(held_whole.remove(at));
                continue;
            }
            let key = match (x >> 16) % 5 {
                0 => format!("Bearer sk_test_{}", (x >> 24) % 7),
                _ => format!("Bearer sk_live_{}", (x >> 24) % 40),
            };
            let make = || {
                let req = match (x >> 32) % 4 {
                    0 => charge(),
                    1 => post(),
                    _ => get(),
                };
                req.insert_header(("Authorization", key.as_str()))
                    .to_request()
            };
            let a = test::call_service(&app_alone, make()).await;
            let w = test::call_service(&app_whole, make()).await;
            assert_eq!(a.status(), w.status(), "{wu:?}, {ac:?}: request {i}");
            let retry = |r: &actix_web::dev::ServiceResponse<_>| common::header(r, "retry-after");
            assert_eq!(retry(&a), retry(&w), "{wu:?}, {ac:?}: request {i}");
            *answers.entry(a.status().as_u16()).or_default() += 1;
            if a.status().is_success() {
                held_alone.push_back(a);
                held_whole.push_back(w);
            }
        }
        let counted = |rig: &Rig| {
            let text = rig.brownout.render_metrics();
            let series = ["brownout_requests_total{", "brownout_rejections_total{"];
            let lines = text
                .lines()
                .filter(|l| series.iter().any(|s| l.starts_with(s)));
            let mut lines = lines.map(str::to_owned).collect::<Vec<_>>();
            lines.sort();
            lines
        };
        let counts = counted(&alone);
        assert_eq!(counts, counted(&whole), "{wu:?}, {ac:?}, killed {killed}");
        // Both kinds of answer, many times (nothing is refused under the kill switch).
        let refused = answers.get(&503).copied().unwrap_or(0);
        let served = answers
            .iter()
            .filter(|(s, _)| **s < 300)
            .map(|(_, n)| n)
            .sum::<usize>();
        assert!(served > 300, "{wu:?}, {ac:?}: {answers:?}");
        assert_eq!(refused > 100, !killed, "{wu:?}, {ac:?}: {answers:?}");
    }
}
