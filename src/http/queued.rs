//! A request waiting for adaptive_concurrency's room (`queue`): it holds its other limiters'
//! permits while it waits for at most `max_wait` (`post_max_wait` for a POST), then goes to
//! the app, or is refused with 503 (its request_rate credits given back), like a request
//! refused at once.

use super::body::{TrackedBody, WorkerGuard};
use super::deadline::Expiry;
use super::respond::{insert_rate_fields, rate_fields, AfterResponse, ResponseFuture};
use super::response::{rejection_response, retry_after_secs};
use crate::engine::{Queued, WorkerEngine};
use crate::limiter::adaptive_concurrency::micros;
use crate::limiter::LimiterName;
use crate::metrics::Outcome;
use crate::tier::Tier;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderValue;
use actix_web::Error;
use std::rc::Rc;

/// Everything a waiting request is let through with.
pub(super) struct Waiting<S> {
    pub(super) service: Rc<S>,
    pub(super) engine: Rc<WorkerEngine>,
    pub(super) req: ServiceRequest,
    pub(super) tier: Tier,
    /// Its outcome once let through (allowed, or one of the other limiters' dark or
    /// fail-open outcomes).
    pub(super) outcome: Outcome,
    pub(super) guard: WorkerGuard,
    pub(super) after: Option<AfterResponse>,
    pub(super) expiry: Expiry,
    /// The `RateLimit-Policy` of a refusal, when the RateLimit fields are on.
    pub(super) policy: Option<HeaderValue>,
}

/// Waits for the slot, then answers as the app does, or refuses the request.
pub(super) async fn wait<S, B>(
    waiting: Waiting<S>,
    queued: Box<Queued>,
) -> Result<ServiceResponse<EitherBody<TrackedBody<B>>>, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody,
{
    let Waiting {
        service,
        engine,
        req,
        tier,
        outcome,
        mut guard,
        after,
        expiry,
        policy,
    } = waiting;
    let max_wait = engine
        .settings
        .load()
        .limiters
        .adaptive_concurrency
        .max_wait_for(tier);
    let Queued {
        wait,
        refund,
        at,
        refunded,
    } = *queued;
    if let Ok(Ok(admitted_at)) = tokio::time::timeout(max_wait, wait).await {
        guard.granted(admitted_at);
        engine.metrics.request(tier, outcome);
        return ResponseFuture::allowed(service.call(req), guard, after, expiry, tier).await;
    }
    // Timed out, or turned away for a higher tier: refused as if at once (the wait has left
    // the room; the guard gives the other limiters' permits back).
    drop(guard);
    let settings = engine.settings.load_full();
    let ac = &settings.limiters.adaptive_concurrency;
    let now = engine.clock.now();
    let rejection = engine.adaptive.refuse(ac, tier, micros(now));
    engine
        .metrics
        .rejection(LimiterName::AdaptiveConcurrency, tier, false);
    engine.metrics.request(tier, Outcome::Rejected);
    if let Some(ticket) = refund {
        settings.rules.refund(&*engine.store, &ticket, at);
    }
    let mut response = rejection_response(&rejection, None);
    if let Some(status) = &refunded {
        let secs = retry_after_secs(rejection.retry_after);
        let fields = rate_fields(&settings, policy, status, Some((&rejection, secs)));
        insert_rate_fields(response.headers_mut(), fields);
    }
    Ok(req.into_response(response).map_into_right_body())
}
