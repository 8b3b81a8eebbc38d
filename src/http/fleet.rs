//! The middleware in fleet mode: the shared store answers what the request asks for
//! request_rate, concurrent_requests and fleet_usage in one script call (on a Redis Cluster,
//! one per hash tag, sent at once), then the same decision as on the local store's answer runs on it. When Redis cannot answer in time
//! (error, timeout, missing script), the request is decided on this server's in-memory
//! limiters instead, as every request is while the breaker is open: a Redis outage degrades
//! to per-server limits, never to none, and never fails a request.

use super::after::RateFields;
use super::body::TrackedBody;
use super::ratelimit;
use super::respond::respond;
use super::worker::Worker;
use crate::classify::Classified;
use crate::engine::{judge, Settings};
use crate::limiter::request_rate::RateStatus;
use crate::rng::SplitMix64;
use crate::store::Ask;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderValue;
use actix_web::Error;
use std::rc::Rc;
use std::sync::Arc;

/// A request waiting for the shared store.
pub(super) struct AwaitingStore<S> {
    pub(super) service: Rc<S>,
    pub(super) worker: Rc<Worker>,
    pub(super) settings: Arc<Settings>,
    pub(super) req: ServiceRequest,
    pub(super) classified: Classified,
    pub(super) plan: Option<String>,
    pub(super) asked: Ask,
    pub(super) rng: SplitMix64,
}

/// Waits for the shared store's answer, then decides and answers as the middleware does on
/// the local store's (`Brownout`'s one decision, [`judge`]).
pub(super) async fn judge_shared<S, B>(
    p: AwaitingStore<S>,
) -> Result<ServiceResponse<EitherBody<TrackedBody<B>>>, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    let AwaitingStore {
        service,
        worker,
        settings,
        req,
        classified,
        plan,
        asked,
        mut rng,
    } = p;
    let engine = &worker.engine;
    let mut answer = engine.answer_shared(&asked).await;
    let request = super::request::request_of(&req, &classified, plan.as_deref());
    let answered = answer.as_mut().map(|answer| (&asked, answer));
    let verdict = judge(engine, &settings, &request, (&mut rng, false), answered);
    respond(
        &service,
        &worker,
        &settings,
        req,
        classified.tier,
        verdict,
        &SharedFields(&settings),
    )
    .await
}

/// The RateLimit fields in fleet mode, built when a response needs them (a network round
/// trip dwarfs writing them).
struct SharedFields<'a>(&'a Settings);

impl RateFields for SharedFields<'_> {
    /// The plan's policies, with the quotas of the request's route, as the middleware writes
    /// them.
    fn policy(&self, status: &RateStatus) -> Option<HeaderValue> {
        let rules = &self.0.rules;
        let policies = ratelimit::policies(rules);
        let plan = policies.get(usize::from(status.plan))?;
        ratelimit::policy(&plan[usize::from(status.elastic)], rules, status)
    }

    fn allowed(&self, status: &RateStatus) -> Option<HeaderValue> {
        ratelimit::allowed(&self.0.rules, status)
    }
}
