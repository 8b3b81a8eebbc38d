//! `limiters.deadline`: a request the app has not answered after `after` stops counting
//! against the in-flight limits (its client has usually given up, and actix-web keeps running
//! the handler), and with `cancel` it is stopped and answered 503.

mod common;

use actix_web::{test, web, App};
use brownout::config::HumanDuration;
use brownout::Mode;
use common::{config, get, Rig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn deadline(cancel: bool) -> brownout::Config {
    let mut c = config();
    c.limiters.worker_utilization.mode = Mode::Off;
    c.limiters.concurrent_requests.mode = Mode::Enforce;
    c.limiters.concurrent_requests.max_in_flight = 1;
    c.limiters.deadline.after = HumanDuration::from_millis(50);
    c.limiters.deadline.cancel = cancel;
    c
}

/// Sets its flag when dropped: tells whether a handler was stopped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An app whose `GET /v1/items?slow` waits until `gate` opens (and notes if it is dropped).
macro_rules! app {
    ($rig:expr, $gate:expr, $dropped:expr) => {{
        let gate = $gate.clone();
        let dropped = $dropped.clone();
        test::init_service(App::new().wrap($rig.brownout.middleware()).route(
            "/v1/items",
            web::get().to(move |req: actix_web::HttpRequest| {
                let (gate, dropped) = (gate.clone(), dropped.clone());
                async move {
                    if req.query_string() == "slow" {
                        let _flag = Dropped(dropped);
                        gate.notified().await;
                    }
                    "ok"
                }
            }),
        ))
        .await
    }};
}

/// Waits `ms` for `answer`, which must not come by then.
async fn unanswered_for<F: std::future::Future + Unpin>(answer: &mut F, ms: u64) {
    tokio::select! {
        _ = answer => panic!("answered before the gate opened"),
        () = actix_web::rt::time::sleep(Duration::from_millis(ms)) => {}
    }
}

/// Sends the slow request to `app` and returns the error it was stopped with (by the
/// deadline), within 5 s.
async fn stopped<S, B>(app: &S) -> actix_web::Error
where
    S: actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse<B>,
        Error = actix_web::Error,
    >,
{
    let call = actix_web::dev::Service::call(app, get().uri("/v1/items?slow").to_request());
    let answer = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("answered at the deadline");
    match answer {
        Err(error) => error,
        Ok(_) => panic!("the request was not stopped"),
    }
}

#[actix_web::test]
async fn a_request_past_its_deadline_stops_counting_and_its_handler_goes_on() {
    let rig = Rig::new(deadline(false));
    let gate = Arc::new(tokio::sync::Notify::new());
    let dropped = Arc::new(AtomicBool::new(false));
    let app = app!(rig, gate, dropped);
    let slow = test::call_service(&app, get().uri("/v1/items?slow").to_request());
    tokio::pin!(slow);
    unanswered_for(&mut slow, 300).await;
    assert_eq!(rig.brownout.in_flight().get, 0, "no longer counted");
    let expired = rig.metric("brownout_expired_requests_total{tier=\"get\"}");
    assert_eq!(expired, 1.0);
    // Its concurrency permit went back: the same client (one request at a time) gets in.
    let next = test::call_service(&app, get().to_request()).await;
    assert_eq!(next.status(), 200);
    assert_eq!(test::read_body(next).await, "ok");
    // The handler was not stopped, and its answer still reaches the client.
    assert!(!dropped.load(Ordering::SeqCst));
    gate.notify_one();
    let late = slow.await;
    assert_eq!(late.status(), 200);
    assert_eq!(test::read_body(late).await, "ok");
    assert_eq!(rig.brownout.in_flight().get, 0, "released once, not twice");
}

#[actix_web::test]
async fn with_cancel_the_handler_is_stopped_and_answered_503() {
    let rig = Rig::new(deadline(true));
    let gate = Arc::new(tokio::sync::Notify::new());
    let dropped = Arc::new(AtomicBool::new(false));
    let app = app!(rig, gate, dropped);
    // brownout answers through actix's error path (the request is with the app by then).
    let error = stopped(&app).await;
    let res = error.error_response();
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers().get("retry-after").unwrap(), "1");
    let body = actix_web::body::to_bytes(res.into_body()).await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["limiter"], "deadline");
    assert_eq!(body["tier"], "get");
    assert!(dropped.load(Ordering::SeqCst), "the handler was stopped");
    assert_eq!(rig.brownout.in_flight().get, 0);
    assert_eq!(
        rig.metric("brownout_expired_requests_total{tier=\"get\"}"),
        1.0
    );
    // A request that answers in time is untouched.
    let fast = test::call_service(&app, get().to_request()).await;
    assert_eq!(fast.status(), 200);
}

#[actix_web::test]
async fn a_worker_reuses_its_deadline_timers_and_each_fires_at_its_own_deadline() {
    let rig = Rig::new(deadline(true));
    let gate = Arc::new(tokio::sync::Notify::new());
    let dropped = Arc::new(AtomicBool::new(false));
    let app = app!(rig, gate, dropped);
    // A request the app answers late but in time: its timer goes back to the worker, parked.
    let in_time = test::call_service(&app, get().uri("/v1/items?slow").to_request());
    tokio::pin!(in_time);
    tokio::select! {
        biased;
        _ = &mut in_time => panic!("answered before the gate opened"),
        () = tokio::task::yield_now() => {}
    }
    gate.notify_one();
    assert_eq!(in_time.await.status(), 200);
    // Each next slow request runs on the timer the last one gave back, and is stopped at its
    // own deadline: not at once (an old deadline), not never (the parked one).
    for n in 1..=2 {
        let started = tokio::time::Instant::now(); // the clock the timer runs on
        let error = stopped(&app).await;
        assert_eq!(error.error_response().status(), 503);
        assert!(started.elapsed() >= Duration::from_millis(50));
        let expired = rig.metric("brownout_expired_requests_total{tier=\"get\"}");
        assert_eq!(expired, f64::from(n));
    }
    assert_eq!(rig.brownout.in_flight().get, 0);
}

#[actix_web::test]
async fn over_http_a_stopped_request_is_a_503_with_its_problem() {
    let rig = Rig::new(deadline(true));
    let middleware = rig.brownout.middleware();
    let server = actix_web::HttpServer::new(move || {
        App::new().wrap(middleware.clone()).route(
            "/v1/items",
            web::get().to(|| async {
                std::future::pending::<()>().await;
                "never"
            }),
        )
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .unwrap();
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    let mut res = awc::Client::new()
        .get(format!("http://{addr}/v1/items"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(
        res.headers().get("content-type").unwrap(),
        "application/problem+json"
    );
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["title"], "Request took too long");
    handle.stop(true).await;
}

/// request_rate alone, its RateLimit fields off: nothing reads the in-flight count, and a
/// request holds nothing and has nothing to write on its response.
fn rate_alone(cancel: bool) -> brownout::Config {
    let mut c = deadline(cancel);
    c.limiters.concurrent_requests.mode = Mode::Off;
    c.limiters.adaptive_concurrency.mode = Mode::Off;
    c.limiters.request_rate.mode = Mode::Enforce;
    c.limiters.request_rate.headers = false;
    c
}

#[actix_web::test]
async fn with_nothing_counting_in_flight_a_request_that_holds_nothing_passes_straight_through() {
    let rig = Rig::new(rate_alone(false));
    let gate = Arc::new(tokio::sync::Notify::new());
    let dropped = Arc::new(AtomicBool::new(false));
    let app = app!(rig, gate, dropped);
    let slow = test::call_service(&app, get().uri("/v1/items?slow").to_request());
    tokio::pin!(slow);
    unanswered_for(&mut slow, 150).await;
    // Neither counted in flight nor timed: nothing of brownout's rides with it.
    assert_eq!(rig.brownout.in_flight().get, 0);
    let expired = rig.metric("brownout_expired_requests_total{tier=\"get\"}");
    assert_eq!(
        expired, 0.0,
        "past its deadline, it had nothing to give back"
    );
    gate.notify_one();
    let answered = slow.await;
    assert_eq!(answered.status(), 200);
    assert_eq!(test::read_body(answered).await, "ok");
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"get\",outcome=\"allowed\"}"),
        1.0
    );
    // The same settings with adaptive_concurrency on: the request holds a slot, and counts.
    let mut counted = rate_alone(false);
    counted.limiters.adaptive_concurrency.mode = Mode::Enforce;
    let rig = Rig::new(counted);
    let app = app!(rig, gate, dropped);
    let slow = test::call_service(&app, get().uri("/v1/items?slow").to_request());
    tokio::pin!(slow);
    unanswered_for(&mut slow, 20).await;
    assert_eq!(rig.brownout.in_flight().get, 1);
    gate.notify_one();
    assert_eq!(test::read_body(slow.await).await, "ok");
    assert_eq!(rig.brownout.in_flight().get, 0);
}

#[actix_web::test]
async fn a_deadline_that_cancels_stops_a_request_that_holds_nothing() {
    let rig = Rig::new(rate_alone(true));
    let gate = Arc::new(tokio::sync::Notify::new());
    let dropped = Arc::new(AtomicBool::new(false));
    let app = app!(rig, gate, dropped);
    assert_eq!(stopped(&app).await.error_response().status(), 503);
    assert!(dropped.load(Ordering::SeqCst), "the handler was stopped");
}
