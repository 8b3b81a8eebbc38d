//! The utilization signal the controller runs on: the in-flight source averages over the
//! sample interval, the demand above capacity shows in `/v1/state`, and the state says when
//! the controller's plan is not enforced.

mod common;

use actix_web::{test, web, App};
use brownout::config::{HumanDuration, SourceKind};
use brownout::control::{SourceError, UtilizationSource};
use brownout::Mode;
use common::{config, Rig};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A source that reads 0 and counts the readings the sampler asks of it between samples.
#[derive(Clone, Default)]
struct Ticks(Arc<AtomicU64>);

impl UtilizationSource for Ticks {
    fn name(&self) -> &str {
        "ticks"
    }
    fn sample(&mut self, _now: Duration) -> Result<f64, SourceError> {
        Ok(0.0)
    }
    fn observe(&mut self, _now: Duration) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Ticks {
    /// Waits (at most 5 s) until the sampler has passed over every source twice more: a
    /// reading of the in-flight source (listed first) taken after this call began.
    async fn two_more(&self) {
        let start = self.0.load(Ordering::SeqCst);
        for _ in 0..500 {
            if self.0.load(Ordering::SeqCst) >= start + 2 {
                return;
            }
            actix_web::rt::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the sampler took no readings");
    }
}

/// A rig on `c` whose controller reads the in-flight source against `capacity` (and a
/// [`Ticks`] source that counts the sampler's readings), with the rig's manual clock, seed
/// and token.
fn in_flight_rig(mut c: brownout::Config, capacity: u32) -> (Rig, Ticks) {
    let wu = &mut c.limiters.worker_utilization;
    wu.source = SourceKind::Max;
    wu.sources = vec![SourceKind::InFlight, SourceKind::Custom];
    wu.capacity = Some(capacity);
    let ticks = Ticks::default();
    let rig = Rig::with(c, |b| b.custom_source(ticks.clone()));
    (rig, ticks)
}

#[actix_web::test]
async fn in_flight_is_averaged_over_the_sample_interval() {
    let mut c = config();
    let wu = &mut c.limiters.worker_utilization;
    wu.mode = Mode::Dark;
    wu.sample_interval = HumanDuration::from_secs(300);
    let (rig, ticks) = in_flight_rig(c, 8);
    let (brownout, clock) = (&rig.brownout, &rig.clock);
    let app = test::init_service(
        App::new()
            .wrap(brownout.middleware())
            .route("/", web::get().to(|| async { "ok" })),
    )
    .await;
    ticks.two_more().await;
    assert_eq!(brownout.sample_now().await.unwrap().utilization, 0.0);

    // Four requests (half the capacity) in flight for 2 s of an 8 s interval: a quarter of
    // that on average, where one reading at the end would have said 0.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(test::call_service(&app, test::TestRequest::get().to_request()).await);
    }
    assert_eq!(brownout.in_flight().get, 4, "bodies not read yet");
    clock.advance(Duration::from_secs(2));
    ticks.two_more().await;
    for res in held {
        assert_eq!(test::read_body(res).await, "ok");
    }
    assert_eq!(brownout.in_flight().get, 0);
    clock.advance(Duration::from_secs(6));
    let plan = brownout.sample_now().await.unwrap();
    assert_eq!(plan.utilization, 0.125, "{plan:?}");
    assert_eq!(plan.demand, 0.125);
    brownout.shutdown().await;
}

/// `GET /v1/state`'s `controller` block.
async fn controller(base: &str) -> Value {
    common::state(base).await["controller"].clone()
}

#[actix_web::test]
async fn the_state_shows_how_far_over_capacity_the_server_runs() {
    let rig = Rig::new(config());
    rig.gauge.set(2.5);
    let plan = rig.brownout.sample_now().await.unwrap();
    assert_eq!(plan.utilization, 1.0, "the controller reads at most 1");
    assert_eq!(plan.demand, 2.5);
    let controller = controller(&rig.admin()).await;
    assert_eq!(controller["utilization"], 1.0);
    assert_eq!(controller["demand"], 2.5);
    assert_eq!(controller["enforced"], true);
    assert_eq!(controller["note"], Value::Null);
}

#[actix_web::test]
async fn the_state_says_plainly_when_nothing_enforces_the_plan() {
    let mut c = config();
    c.limiters.worker_utilization.mode = Mode::Dark;
    let rig = Rig::new(c);
    let base = rig.admin();
    let dark = controller(&base).await;
    assert_eq!(dark["enforced"], false);
    let note = dark["note"].as_str().unwrap();
    assert!(note.contains("worker_utilization is dark"), "{note}");

    let res = awc::Client::new()
        .put(format!("{base}/v1/kill-switch"))
        .bearer_auth("test-token")
        .send_json(&serde_json::json!({"engaged": true}))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let killed = controller(&base).await;
    assert_eq!(killed["enforced"], false);
    let note = killed["note"].as_str().unwrap();
    assert!(note.contains("kill switch"), "{note}");
}

#[actix_web::test]
async fn work_the_fast_guard_refused_counts_as_demand() {
    let mut c = config();
    let wu = &mut c.limiters.worker_utilization;
    wu.mode = Mode::Enforce;
    let ac = &mut c.limiters.adaptive_concurrency;
    ac.mode = Mode::Enforce;
    (ac.initial_limit, ac.min_limit, ac.max_limit, ac.queue) = (4, 1, 4, 0);
    let (rig, ticks) = in_flight_rig(c, 4);
    let (brownout, clock) = (&rig.brownout, &rig.clock);
    let app = test::init_service(
        App::new()
            .wrap(brownout.middleware())
            .route("/", web::post().to(|| async { "ok" })),
    )
    .await;
    let post = || test::TestRequest::post().uri("/").to_request();
    ticks.two_more().await;
    brownout.sample_now().await.unwrap();

    // The app holds 4 (its capacity) for a whole interval; the fast guard refuses 4 more.
    // In flight says 1; the work offered is twice that: 8 requests for as long as each of
    // the 4 let in stayed (8 s), over 8 s and a capacity of 4.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(test::call_service(&app, post()).await);
    }
    for _ in 0..4 {
        let res = test::call_service(&app, post()).await;
        assert_eq!(res.status(), 503);
        let body: Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
        assert_eq!(body["limiter"], "adaptive_concurrency");
    }
    ticks.two_more().await;
    clock.advance(Duration::from_secs(8));
    ticks.two_more().await;
    let plan = brownout.sample_now().await.unwrap();
    assert!((plan.demand - 2.0).abs() < 1e-9, "{plan:?}");
    assert_eq!(plan.utilization, 1.0);
    let controller = controller(&rig.admin()).await;
    assert_eq!(controller["demand"], plan.demand);
    let gauge = rig.metric("brownout_utilization_ratio");
    assert!(
        (gauge - 2.0).abs() < 1e-9,
        "the dashboard's gauge reads {gauge}"
    );
    for res in held {
        assert_eq!(test::read_body(res).await, "ok");
    }
}

#[actix_web::test]
async fn what_the_controller_shed_is_left_out_of_its_input_and_shown_added_back() {
    let rig = Rig::new(config());
    let app = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/v1/items", web::get().to(|| async { "items" }))
            .route("/v1/charges", web::post().to(|| async { "charged" })),
    )
    .await;
    rig.shed_all().await;
    // Two critical requests pass; two GETs are shed. The gauge (the work that came past the
    // controller) reads 0.5: the whole demand was twice that.
    for _ in 0..2 {
        let charge = test::TestRequest::post().uri("/v1/charges").to_request();
        assert_eq!(test::call_service(&app, charge).await.status(), 200);
        let get = test::TestRequest::get().uri("/v1/items").to_request();
        let res = test::call_service(&app, get).await;
        let body: Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
        assert_eq!(body["limiter"], "worker_utilization");
    }
    rig.gauge.set(0.5);
    rig.clock.advance(Duration::from_secs(8));
    let plan = rig.brownout.sample_now().await.unwrap();
    assert_eq!(
        plan.utilization, 0.5,
        "the controller's own input: {plan:?}"
    );
    assert_eq!(plan.demand, 1.0, "{plan:?}");
}
