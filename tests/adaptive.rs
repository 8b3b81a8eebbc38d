//! adaptive_concurrency through the middleware on a real actix app, with the actors learning
//! its limit on a manual clock: the floor, a limit that shrinks when requests queue and grows
//! back when they are quick again, a slower server learned at once, refusals in tier order,
//! critical requests refused only past the ceiling, and then by client, the waiting room (`queue`; only a refusal holds a lower
//! tier off), dark mode, and the admin state.

mod common;

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::{test, web, App};
use brownout::clock::Clock;
use brownout::config::HumanDuration;
use brownout::{Config, Mode};
use common::{charge, config, get, post, Rig};
use std::collections::VecDeque;
use std::time::Duration;

fn adaptive(mode: Mode) -> brownout::Config {
    let mut c = config();
    c.limiters.worker_utilization.mode = Mode::Off;
    let a = &mut c.limiters.adaptive_concurrency;
    a.mode = mode;
    a.initial_limit = 10;
    a.min_limit = 2;
    a.window = HumanDuration::from_millis(100);
    a.floor_window = HumanDuration::from_secs(10);
    // Critical requests are never refused here (the ceiling's own test sets it).
    a.critical_ceiling = 0.0;
    c
}

/// `GET /v1/state` over the admin API.
async fn state(rig: &Rig) -> serde_json::Value {
    common::state(&rig.admin()).await
}

macro_rules! app {
    ($rig:expr) => {
        test::init_service(
            App::new()
                .wrap($rig.brownout.middleware())
                .route("/v1/items", web::get().to(|| async { "ok" }))
                .route("/v1/items", web::post().to(|| async { "ok" }))
                .route("/v1/charges", web::post().to(|| async { "ok" })),
        )
        .await
    };
}

/// A charge (critical) from client `n`.
fn charge_from(n: u32) -> actix_http::Request {
    charge()
        .insert_header(("authorization", format!("Bearer sk_live_{n}")))
        .to_request()
}

/// Waits (at most 5 s) until `/v1/state` shows adaptive_concurrency's critical share at `want`.
async fn critical_share(rig: &Rig, want: f64) {
    for _ in 0..500 {
        let share = state(rig).await["adaptive_concurrency"]["critical_share"].as_f64();
        if share.is_some_and(|s| (s - want).abs() < 1e-9) {
            return;
        }
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("critical_share never read {want}: {:#}", state(rig).await);
}

#[actix_web::test]
async fn critical_demand_past_the_ceiling_is_refused_by_client_and_served_again_after() {
    let mut c = adaptive(Mode::Enforce);
    let a = &mut c.limiters.adaptive_concurrency;
    (a.initial_limit, a.min_limit, a.max_limit) = (2, 2, 2);
    a.critical_ceiling = 2.0;
    let rig = Rig::new(c);
    let app = app!(rig);
    // Twice the limit of 2 may be in flight; the fifth critical request is refused at once.
    let mut held = Vec::new();
    for n in 0..4 {
        held.push(test::call_service(&app, charge_from(n)).await);
    }
    assert!(held.iter().all(|r| r.status().is_success()));
    let refused = test::call_service(&app, charge_from(4)).await;
    assert_eq!(refused.status(), 503);
    let body: serde_json::Value = test::read_body_json(refused).await;
    assert_eq!(
        (body["limiter"].as_str(), body["tier"].as_str()),
        (Some("adaptive_concurrency"), Some("critical"))
    );
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("The server has more critical requests than it can answer in time"),
        "a critical client is not told critical requests are served: {detail}"
    );
    // The window overflowed: 90% of the clients are admitted from now on.
    rig.clock.advance(Duration::from_millis(100));
    critical_share(&rig, 0.9).await;
    assert_eq!(rig.metric("brownout_concurrency_critical_share"), 0.9);
    finish(held).await;
    // With room again, the clients outside the share are refused, and the same ones each time.
    let mut refused = [Vec::new(), Vec::new()];
    for round in &mut refused {
        for n in 100..400 {
            let res = test::call_service(&app, charge_from(n)).await;
            if res.status() == 503 {
                round.push(n);
            } else {
                finish(vec![res]).await;
            }
        }
    }
    assert_eq!(refused[0], refused[1], "by client, not by chance");
    assert!(
        (10..=60).contains(&refused[0].len()),
        "about 10% of 300 clients: {}",
        refused[0].len()
    );
    // A window in which every critical request found room gives the rest back.
    rig.clock.advance(Duration::from_millis(100));
    critical_share(&rig, 1.0).await;
    for &n in &refused[0] {
        let res = test::call_service(&app, charge_from(n)).await;
        assert!(res.status().is_success(), "client {n} is served again");
        finish(vec![res]).await;
    }
}

fn test_mode() -> test::TestRequest {
    get().insert_header(("brownout-test-mode", "true"))
}

/// Ends held requests (their bodies read: their holds go, with their latency).
async fn finish<B: actix_web::body::MessageBody>(held: Vec<ServiceResponse<B>>) {
    for res in held {
        assert_eq!(test::read_body(res).await, "ok");
    }
}

#[actix_web::test]
async fn the_limit_learns_from_latency_and_refuses_in_tier_order() {
    // Without a waiting room, a request without room under its tier's share is refused at
    // once (with one, a wait that runs out takes room under the whole limit when the tiers
    // above it fit: tested further down).
    let mut c = adaptive(Mode::Enforce);
    c.limiters.adaptive_concurrency.queue = 0;
    let rig = Rig::new(c);
    let app = app!(rig);
    assert_eq!(rig.metric("brownout_concurrency_limit"), 10.0);

    // The floor: four GETs of 50 ms in a window where nothing was refused.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(test::call_service(&app, get().to_request()).await);
    }
    rig.clock.advance(Duration::from_millis(50));
    finish(held).await;
    rig.clock.advance(Duration::from_millis(60));
    for _ in 0..500 {
        if state(&rig).await["adaptive_concurrency"]["floor_seconds"] == 0.05 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    let s = state(&rig).await;
    assert_eq!(s["adaptive_concurrency"]["floor_seconds"], 0.05, "{s:#}");
    assert_eq!(
        rig.metric("brownout_concurrency_limit"),
        10.0,
        "within tolerance"
    );

    // Limit 10: GET may use 9, test 8 (each counting the tiers above it), POST 10; critical
    // requests are never refused.
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(test::call_service(&app, get().to_request()).await);
    }
    let refused = test::call_service(&app, test_mode().to_request()).await;
    assert_eq!(refused.status(), 503, "test traffic goes first");
    held.push(test::call_service(&app, get().to_request()).await);
    let refused = test::call_service(&app, get().to_request()).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers().get("retry-after").unwrap(), "1");
    let body: serde_json::Value = test::read_body_json(refused).await;
    assert_eq!(body["limiter"], "adaptive_concurrency");
    assert_eq!(body["tier"], "get");
    // POSTs count only their own: the GETs took none of their 10.
    for _ in 0..10 {
        held.push(test::call_service(&app, post().to_request()).await);
    }
    assert_eq!(
        test::call_service(&app, post().to_request()).await.status(),
        503
    );
    for _ in 0..3 {
        held.push(test::call_service(&app, charge().to_request()).await);
    }
    assert!(held.iter().all(|r| r.status().is_success()));
    let s = state(&rig).await;
    assert_eq!(
        s["adaptive_concurrency"]["in_flight"], 22,
        "critical requests counted (after the POSTs: they take room, never lose it)"
    );

    // They all take 200 ms, four times the floor, and the overload goes on (POSTs of 200 ms
    // keep the limit full, one more refused every 10 ms): once the queue has stood three
    // windows, the gradient halves the limit (no headroom: slower than tolerated).
    rig.clock.advance(Duration::from_millis(200));
    finish(held).await;
    let mut flight = VecDeque::new();
    let (limit, overload_refused) =
        overload(&rig, &app, Until::LimitLeaves(10.0), 200, &mut flight).await;
    assert!((limit - 5.0).abs() < 1e-9, "{limit}");
    // Three POSTs left in flight: GET's share (4.5) has room for one more, but the POST
    // refused a moment ago holds GETs off for tier_hold (1 s) while the app is busy (half
    // the share in flight)...
    while flight.len() > 3 {
        finish(vec![flight.pop_front().unwrap().1]).await;
    }
    let held_off = test::call_service(&app, get().to_request()).await;
    assert_eq!(held_off.status(), 503, "held off after a POST was refused");
    // ... and no longer once the burst is over: a hold does not refuse an idle app.
    finish(flight.drain(..).map(|(_, r)| r).collect()).await;
    let served = test::call_service(&app, get().to_request()).await;
    assert!(served.status().is_success(), "{}", served.status());
    finish(vec![served]).await;

    // Now POST may use 5, and the rest is refused.
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(test::call_service(&app, post().to_request()).await);
    }
    assert!(held.iter().all(|r| r.status().is_success()));
    assert_eq!(
        test::call_service(&app, post().to_request()).await.status(),
        503
    );
    finish(held).await;
    let rejected = |tier: &str| {
        rig.metric(&format!(
            "brownout_rejections_total{{limiter=\"adaptive_concurrency\",tier=\"{tier}\",mode=\"enforce\"}}"
        ))
    };
    assert_eq!(
        (rejected("test"), rejected("get"), rejected("post")),
        (1.0, 2.0, 2.0 + overload_refused as f64)
    );
    assert_eq!(rejected("critical"), 0.0);
}

/// A rig whose limit stays at 2, in `mode`.
fn limit_of_two(mode: Mode) -> Rig {
    let mut c = adaptive(mode);
    c.limiters.adaptive_concurrency.initial_limit = 2;
    Rig::new(c)
}

#[actix_web::test]
async fn in_dark_mode_the_refusals_are_only_counted() {
    let rig = limit_of_two(Mode::Dark);
    let app = app!(rig);
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(test::call_service(&app, post().to_request()).await);
    }
    assert!(held.iter().all(|r| r.status().is_success()));
    finish(held).await;
    let dark = rig.metric(
        "brownout_rejections_total{limiter=\"adaptive_concurrency\",tier=\"post\",mode=\"dark\"}",
    );
    assert_eq!(dark, 2.0);
    let s = state(&rig).await;
    assert_eq!(
        s["limiters"]["adaptive_concurrency"]["counters"]["dark_rejected"],
        2
    );
    assert_eq!(s["adaptive_concurrency"]["in_flight"], 0);
}

#[actix_web::test]
async fn the_kill_switch_of_one_limiter_works_over_the_admin_api() {
    let rig = limit_of_two(Mode::Enforce);
    let app = app!(rig);
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(test::call_service(&app, post().to_request()).await);
    }
    assert_eq!(
        test::call_service(&app, post().to_request()).await.status(),
        503
    );
    let url = format!("{}/v1/limiters/adaptive_concurrency/mode", rig.admin());
    let res = awc::Client::new()
        .put(url)
        .bearer_auth("test-token")
        .send_json(&serde_json::json!({"mode": "off"}))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let more = test::call_service(&app, post().to_request()).await;
    assert!(more.status().is_success(), "off: nothing refused");
    held.push(more);
    finish(held).await;
    assert_eq!(state(&rig).await["adaptive_concurrency"]["in_flight"], 0);
}

/// The floor `/v1/state` shows (seconds), if one was learned.
async fn floor(rig: &Rig) -> Option<f64> {
    state(rig).await["adaptive_concurrency"]["floor_seconds"].as_f64()
}

/// Four GETs of 50 ms in a window that refused nothing: the floor is 50 ms.
async fn learn_floor<S, B>(rig: &Rig, app: &S)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(test::call_service(app, get().to_request()).await);
    }
    rig.clock.advance(Duration::from_millis(50));
    finish(held).await;
    rig.clock.advance(Duration::from_millis(60));
    for _ in 0..500 {
        if floor(rig).await == Some(0.05) {
            return;
        }
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no floor of 50 ms: {:#}", state(rig).await);
}

/// `n` POSTs sent one after another, their responses held (their requests still in flight).
async fn posts<S, B>(app: &S, n: usize) -> Vec<ServiceResponse<B>>
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
{
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(test::call_service(app, post().to_request()).await);
    }
    held
}

/// When [`overload`] stops.
enum Until {
    /// The published limit is no longer this.
    LimitLeaves(f64),
    /// `/v1/state` shows this floor (seconds).
    Floor(f64),
}

/// Overload as the app meets it: POSTs that each take `ms`, as many in flight as the limit
/// admits and one more refused every 10 ms step of the clock, the oldest finishing as they
/// reach `ms`; so every window refuses requests and ends with the limit full (a queue that
/// stands, whenever the sampler closes it). Runs until `until` (at most 10 s of clock), the
/// requests it leaves in flight in `held`; returns the limit then and the POSTs refused.
async fn overload<S, B>(
    rig: &Rig,
    app: &S,
    until: Until,
    ms: u64,
    held: &mut VecDeque<(Duration, ServiceResponse<B>)>,
) -> (f64, u64)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let mut refused = 0;
    for _ in 0..1000 {
        let now = rig.clock.now();
        while held
            .front()
            .is_some_and(|(at, _)| now - *at >= Duration::from_millis(ms))
        {
            finish(vec![held.pop_front().unwrap().1]).await;
        }
        for _ in 0..50 {
            let res = test::call_service(app, post().to_request()).await;
            if res.status() == 503 {
                refused += 1;
                break;
            }
            assert!(res.status().is_success(), "{}", res.status());
            held.push_back((now, res));
        }
        let limit = rig.metric("brownout_concurrency_limit");
        let done = match until {
            Until::LimitLeaves(from) => limit != from,
            Until::Floor(f) => floor(rig).await == Some(f),
        };
        if done {
            return (limit, refused);
        }
        rig.clock.advance(Duration::from_millis(10));
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the overload never got there: {:#}", state(rig).await);
}

/// Two POSTs of 55 ms (within 1.25 × the 50 ms floor), nothing refused, until the limit is
/// no longer `from` (a window that also held the slow requests of an overload just over
/// leaves it); returns it.
async fn quick_until_it_moves<S, B>(rig: &Rig, app: &S, from: f64) -> f64
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    for _ in 0..50 {
        let held = posts(app, 2).await;
        rig.clock.advance(Duration::from_millis(55));
        finish(held).await;
        for _ in 0..20 {
            let limit = rig.metric("brownout_concurrency_limit");
            if limit != from {
                return limit;
            }
            rig.clock.advance(Duration::from_millis(10));
            actix_web::rt::time::sleep(Duration::from_millis(10)).await;
        }
    }
    panic!("the limit stayed at {from}: {:#}", state(rig).await);
}

#[actix_web::test]
async fn a_limit_an_overload_shrank_grows_back_once_requests_are_quick_again() {
    let rig = Rig::new(adaptive(Mode::Enforce));
    let app = app!(rig);
    learn_floor(&rig, &app).await;
    let mut held = VecDeque::new();
    let (mut limit, _) = overload(&rig, &app, Until::LimitLeaves(10.0), 200, &mut held).await;
    assert!((limit - 5.0).abs() < 1e-9, "{limit}");
    finish(held.into_iter().map(|(_, r)| r).collect()).await;
    // Two POSTs of 55 ms (within 1.25 × 50 ms) a window, nothing refused: +√limit a window,
    // up to initial_limit (10) and no further.
    for expected in [
        5.0 + 5f64.sqrt(),
        7.236_067_977_499_79 + 7.236_067_977_499_79f64.sqrt(),
        10.0,
    ] {
        limit = quick_until_it_moves(&rig, &app, limit).await;
        assert!(
            (limit - expected).abs() < 1e-6,
            "{limit} (expected {expected})"
        );
    }
}

#[actix_web::test]
async fn a_server_that_got_slower_is_learned_long_before_floor_window() {
    let rig = Rig::new(adaptive(Mode::Enforce));
    let app = app!(rig);
    learn_floor(&rig, &app).await;
    // Requests now take 150 ms, and every window refuses with the limit full: once the queue
    // has stood three windows, 10 → 5 → 2.5 → min (2), a window each.
    let mut held = VecDeque::new();
    let mut limit = 10.0;
    for expected in [5.0, 2.5, 2.0] {
        limit = overload(&rig, &app, Until::LimitLeaves(limit), 150, &mut held)
            .await
            .0;
        assert!((limit - expected).abs() < 1e-9, "{limit}");
    }
    // At min they still take three times the floor: the floor is measured again at once (a
    // few windows: two slow ones in a row, then one draining and one measuring), not after
    // floor_window (10 s).
    let started = rig.clock.now();
    overload(&rig, &app, Until::Floor(0.15), 150, &mut held).await;
    let took = rig.clock.now() - started;
    assert!(took < Duration::from_secs(10), "{took:?}");
    finish(held.into_iter().map(|(_, r)| r).collect()).await;
}

/// A rig whose limit stays at 2, with a waiting room of `queue` and `max_wait`; with
/// `Some(post_wait)`, POSTs wait that long and `tier_hold` is the default (1 s), with `None`
/// they wait `max_wait` and nothing is held off.
fn queued(queue: u32, max_wait: Duration, post_wait: Option<Duration>) -> Rig {
    Rig::new(queued_config(queue, max_wait, post_wait))
}

fn queued_config(queue: u32, max_wait: Duration, post_wait: Option<Duration>) -> Config {
    let mut c = adaptive(Mode::Enforce);
    let a = &mut c.limiters.adaptive_concurrency;
    a.initial_limit = 2;
    a.get_share = 1.0;
    a.test_share = 1.0;
    a.queue = queue;
    a.max_wait = HumanDuration::from_millis(max_wait.as_millis() as u64);
    match post_wait {
        Some(wait) => a.post_max_wait = HumanDuration::from_millis(wait.as_millis() as u64),
        None => {
            a.post_max_wait = a.max_wait;
            a.tier_hold = HumanDuration::from_secs(0);
        }
    }
    c
}

/// Waits (at most 5 s) until `/v1/state` shows `n` requests waiting.
async fn waiting(rig: &Rig, n: u64) {
    for _ in 0..500 {
        if state(rig).await["adaptive_concurrency"]["waiting"] == n {
            return;
        }
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not {n} waiting: {:#}", state(rig).await);
}

#[actix_web::test]
async fn requests_without_room_wait_for_it_and_a_freed_slot_goes_to_the_highest_tier() {
    let rig = queued(8, Duration::from_secs(10), None);
    let app = app!(rig);
    let mut held = posts(&app, 2).await;
    // No room: a POST, then a GET, wait (tasks of their own).
    let post = actix_web::rt::spawn(app.call(post().to_request()));
    waiting(&rig, 1).await;
    let get = actix_web::rt::spawn(app.call(get().to_request()));
    waiting(&rig, 2).await;
    let in_flight =
        |tier: &str| rig.metric(&format!("brownout_in_flight_requests{{tier=\"{tier}\"}}"));
    assert_eq!(
        (in_flight("post"), in_flight("get")),
        (2.0, 0.0),
        "waiting is not in flight"
    );
    // A critical request never waits (it takes room, and is never refused).
    let charge = test::call_service(&app, charge().to_request()).await;
    assert!(charge.status().is_success());
    finish(vec![charge]).await;
    // A freed slot goes to the POST; the GET waits for the next.
    rig.clock.advance(Duration::from_millis(50));
    finish(vec![held.remove(0)]).await;
    let post = post.await.unwrap().unwrap();
    assert!(post.status().is_success());
    waiting(&rig, 1).await;
    assert!(!get.is_finished());
    finish(vec![held.remove(0)]).await;
    let get = get.await.unwrap().unwrap();
    assert!(get.status().is_success());
    finish(vec![post, get]).await;
    let s = state(&rig).await;
    assert_eq!(
        (
            s["adaptive_concurrency"]["in_flight"].as_u64(),
            s["adaptive_concurrency"]["waiting"].as_u64()
        ),
        (Some(0), Some(0)),
        "{s:#}"
    );
    let outcome = |o: &str| {
        rig.metric(&format!(
            "brownout_requests_total{{tier=\"get\",outcome=\"{o}\"}}"
        ))
    };
    assert_eq!(
        (outcome("allowed"), outcome("rejected")),
        (1.0, 0.0),
        "counted once let through"
    );
}

/// Asserts `res` is adaptive_concurrency's 503 for `tier`.
async fn refused_503<B: MessageBody>(res: ServiceResponse<B>, tier: &str) {
    assert_eq!(res.status(), 503, "{tier}");
    assert_eq!(res.headers().get("retry-after").unwrap(), "1");
    let body: serde_json::Value = test::read_body_json(res).await;
    assert_eq!(
        (body["limiter"].as_str(), body["tier"].as_str()),
        (Some("adaptive_concurrency"), Some(tier))
    );
}

#[actix_web::test]
async fn a_lower_tier_waiting_stays_behind_a_higher_one_while_the_room_has_places() {
    let rig = queued(2, Duration::from_secs(10), None);
    let app = app!(rig);
    let mut held = posts(&app, 2).await;
    // A test request waits; a GET that has to wait goes ahead of it, and the room (two
    // places) keeps both.
    let test_req = actix_web::rt::spawn(app.call(test_mode().to_request()));
    waiting(&rig, 1).await;
    let get_req = actix_web::rt::spawn(app.call(get().to_request()));
    waiting(&rig, 2).await;
    // A freed slot goes to the GET; the test request waits for the next, and is served.
    finish(vec![held.remove(0)]).await;
    let get = get_req.await.unwrap().unwrap();
    assert!(get.status().is_success());
    waiting(&rig, 1).await;
    assert!(!test_req.is_finished());
    finish(held).await;
    let test_res = test_req.await.unwrap().unwrap();
    assert!(test_res.status().is_success());
    finish(vec![get, test_res]).await;
    assert_eq!(
        rig.metric("brownout_rejections_total{limiter=\"adaptive_concurrency\",tier=\"test\",mode=\"enforce\"}"),
        0.0,
        "nothing turned away"
    );
    let s = state(&rig).await;
    assert_eq!(s["adaptive_concurrency"]["waiting"], 0, "{s:#}");
    assert_eq!(s["adaptive_concurrency"]["in_flight"], 0, "{s:#}");
}

#[actix_web::test]
async fn a_request_that_has_to_wait_takes_a_lower_tiers_place_in_a_full_room_and_one_that_waits_too_long_is_refused(
) {
    let rig = queued(
        1,
        Duration::from_millis(100),
        Some(Duration::from_millis(300)),
    );
    let app = app!(rig);
    let held = posts(&app, 2).await;
    // A GET that has to wait takes the place of the test request waiting in the full room
    // of one (turned away), then is refused once it has waited max_wait.
    let test_req = actix_web::rt::spawn(app.call(test_mode().to_request()));
    waiting(&rig, 1).await;
    let refused = test::call_service(&app, get().to_request()).await;
    refused_503(test_req.await.unwrap().unwrap(), "test").await;
    refused_503(refused, "get").await;
    // A POST that has to wait fills the room of one: a GET may not pass it, nor wait behind
    // it here, and a second POST finds no place either. It waits post_max_wait, longer than a
    // GET.
    #[allow(clippy::disallowed_methods)] // real time: the wait is a tokio timer
    let started = std::time::Instant::now();
    let post_req = actix_web::rt::spawn(app.call(post().to_request()));
    waiting(&rig, 1).await;
    refused_503(test::call_service(&app, get().to_request()).await, "get").await;
    refused_503(test::call_service(&app, post().to_request()).await, "post").await;
    refused_503(post_req.await.unwrap().unwrap(), "post").await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    let rejected = |tier: &str| {
        rig.metric(&format!(
            "brownout_rejections_total{{limiter=\"adaptive_concurrency\",tier=\"{tier}\",mode=\"enforce\"}}"
        ))
    };
    assert_eq!(
        (rejected("test"), rejected("get"), rejected("post")),
        (1.0, 2.0, 2.0)
    );
    let outcome = rig.metric("brownout_requests_total{tier=\"get\",outcome=\"rejected\"}");
    assert_eq!(outcome, 2.0);
    finish(held).await;
    let s = state(&rig).await;
    assert_eq!(s["adaptive_concurrency"]["waiting"], 0, "{s:#}");
    assert_eq!(s["adaptive_concurrency"]["in_flight"], 0, "{s:#}");
}

#[actix_web::test]
async fn a_request_whose_wait_runs_out_with_room_under_the_whole_limit_is_served() {
    // A limit of 2, of which test requests may hold 1 (counting the tiers above them).
    let mut c = queued_config(4, Duration::from_millis(100), None);
    c.limiters.adaptive_concurrency.test_share = 0.5;
    let rig = Rig::new(c);
    let app = app!(rig);
    let held = posts(&app, 1).await;
    #[allow(clippy::disallowed_methods)] // real time: the wait is a tokio timer
    let started = std::time::Instant::now();
    // Its share is full: it waits its 100 ms, then finds room under the whole limit (one in
    // flight, nothing above it waiting) and is let in rather than refused.
    let res = test::call_service(&app, test_mode().to_request()).await;
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(res.status().is_success(), "{}", res.status());
    finish(vec![res]).await;
    finish(held).await;
    assert_eq!(
        rig.metric("brownout_rejections_total{limiter=\"adaptive_concurrency\",tier=\"test\",mode=\"enforce\"}"),
        0.0
    );
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"test\",outcome=\"allowed\"}"),
        1.0
    );
    let s = state(&rig).await;
    assert_eq!(s["adaptive_concurrency"]["waiting"], 0, "{s:#}");
    assert_eq!(s["adaptive_concurrency"]["in_flight"], 0, "{s:#}");
}

#[actix_web::test]
async fn a_post_that_waited_and_was_served_holds_no_get_off() {
    let rig = queued(4, Duration::from_millis(100), Some(Duration::from_secs(10)));
    let app = app!(rig);
    let mut held = posts(&app, 2).await;
    let post_req = actix_web::rt::spawn(app.call(post().to_request()));
    waiting(&rig, 1).await;
    rig.clock.advance(Duration::from_millis(50));
    finish(vec![held.remove(0)]).await;
    let served = post_req.await.unwrap().unwrap();
    assert!(served.status().is_success());
    finish(held).await;
    // One POST in flight under a limit of 2, 50 ms after the POST had to wait (tier_hold is
    // 1 s): only a refusal holds GETs off, so this one finds room.
    let get = test::call_service(&app, get().to_request()).await;
    assert!(get.status().is_success(), "{}", get.status());
    finish(vec![served, get]).await;
    assert_eq!(
        rig.metric("brownout_requests_total{tier=\"get\",outcome=\"allowed\"}"),
        1.0
    );
    let s = state(&rig).await;
    assert_eq!(s["adaptive_concurrency"]["in_flight"], 0, "{s:#}");
}

/// The route classes `/v1/state` shows: (route, tier, service time in seconds).
async fn route_classes(rig: &Rig) -> Vec<(String, String, f64)> {
    let s = state(rig).await;
    let mut out: Vec<(String, String, f64)> = s["adaptive_concurrency"]["route_classes"]
        .as_array()
        .expect("route_classes")
        .iter()
        .map(|c| {
            (
                c["route"].as_str().unwrap_or("?").to_owned(),
                c["tier"].as_str().unwrap_or("?").to_owned(),
                c["service_time_seconds"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[actix_web::test]
async fn service_time_is_learned_per_route_as_the_router_matched_it() {
    let rig = Rig::new(adaptive(Mode::Enforce));
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/v1/items/{id}", web::get().to(|| async { "cached" }))
            .route("/v1/reports", web::get().to(|| async { "ok" }))
            .route("/v1/charges", web::post().to(|| async { "ok" })),
    )
    .await;
    // Two reports of 50 ms; items by three ids, answered at once; a path no route matches;
    // a lowercase `post` that the router answers 404 (methods are case-sensitive).
    let mut held = Vec::new();
    for _ in 0..2 {
        let r = test::call_service(&app, get().uri("/v1/reports").to_request()).await;
        held.push(r);
    }
    rig.clock.advance(Duration::from_millis(50));
    finish(held).await;
    for id in ["1", "2", "item_3"] {
        let uri = format!("/v1/items/{id}");
        let r = test::call_service(&app, get().uri(&uri).to_request()).await;
        assert_eq!(r.status(), 200);
    }
    let r = test::call_service(&app, get().uri("/v1/nope/42").to_request()).await;
    assert_eq!(r.status(), 404);
    drop(r);
    let lower = actix_web::http::Method::from_bytes(b"post").unwrap();
    let r = test::call_service(&app, charge().method(lower).to_request()).await;
    assert_eq!(r.status(), 404, "actix routes methods case-sensitively");
    drop(r);
    rig.clock.advance(Duration::from_millis(110));
    let want = |classes: &[(String, String, f64)]| {
        classes
            .iter()
            .any(|c| c.0 == "GET /v1/reports" && c.2 == 0.05)
            && classes
                .iter()
                .any(|c| c.0 == "GET /v1/items/{id}" && c.2 < 0.001)
            && classes.iter().any(|c| c.0 == "unmatched")
    };
    let mut classes = Vec::new();
    for _ in 0..500 {
        classes = route_classes(&rig).await;
        if want(&classes) {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(want(&classes), "{classes:?}");
    // Three ids are one route; nothing else was learned (no class per path, no `post` route).
    assert_eq!(classes.len(), 4, "{classes:?}"); // unmatched: a GET and a `post`
    assert!(classes.iter().all(|c| c.1 == "get" || c.0 == "unmatched"));
    // A `post /v1/charges` is not a charge: its class is the POST tier's, not critical.
    assert!(
        classes.iter().any(|c| c.0 == "unmatched" && c.1 == "post"),
        "{classes:?}"
    );
    // The metric names a class by its id, never by its path.
    let text = rig.brownout.render_metrics();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("brownout_route_service_time_seconds{"))
        .collect();
    assert_eq!(series.len(), 4, "{series:?}");
    assert!(series.iter().all(|l| !l.contains('/')), "{series:?}");
    assert!(
        series.iter().any(|l| l.contains("route=\"unmatched\"")),
        "{series:?}"
    );
}
