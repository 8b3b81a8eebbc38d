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

#[actix_web::test]
async fn in_flight_is_averaged_over_the_sample_interval() {
    let mut c = config();
    let wu = &mut c.limiters.worker_utilization;
    wu.mode = Mode::Dark;
    wu.source = SourceKind::Max;
    wu.sources = vec![SourceKind::InFlight, SourceKind::Custom];
    wu.capacity = 8;
    wu.sample_interval = HumanDuration::from_secs(300);
    let ticks = Ticks::default();
    // The rig's manual clock, seed and token, with this source in place of its gauge.
    let rig = Rig::with(c, |b| b.custom_source(ticks.clone()));
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
