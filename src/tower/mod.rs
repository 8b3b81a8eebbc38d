//! The tower front door (feature `tower`): the same engine, settings, chain and responses as
//! the actix middleware, behind a [`tower_layer::Layer`] over `http` 1 requests, for axum
//! (`Router::layer`), tonic (`Server::builder().layer`) and hyper services.
//!
//! A request is classified from its headers, decided by the one limiter chain (the
//! middleware's), and either refused (429/503 with `Retry-After`, the
//! RateLimit fields and a problem+json body; for gRPC, its own words: HTTP 200 with
//! `grpc-status` 8 or 14, see [`grpc`]) or passed on with its hold, which the response body
//! keeps until it ends, fails or is dropped: a body streamed after the head and a client that
//! hangs up free the request's slots exactly as in actix. A request that waits for
//! adaptive_concurrency's room waits here, asynchronously, for at most `max_wait`. In fleet
//! mode the shared store answers first, as in the middleware. `limiters.deadline` arms its
//! timer (inline in the response future) when the app does not answer at once: past it the
//! request stops counting, and with `cancel` the app's future is dropped and the request
//! answered 503 (gRPC: DEADLINE_EXCEEDED).
//!
//! The route a request's latency is learned for is axum's `MatchedPath` (feature `axum`)
//! where the layer runs inside the router (`Router::layer`), the gRPC method for gRPC, its
//! tier's otherwise. The peer address is axum's `ConnectInfo<SocketAddr>` (feature `axum`),
//! tonic's `TcpConnectInfo` (feature `tonic`) or a `SocketAddr` in the request's extensions
//! (hyper users insert it).

mod body;
mod future;
pub mod grpc;
mod request;

pub(crate) use request::peer_addr;

pub use body::BrownoutBody;
pub use future::ResponseFuture;
use future::{wait, Waiting};
use request::{learn_route, limiter_request, peer};

use crate::classify::Classified;
use crate::classify::TEST_MODE_HEADER;
use crate::control::RuntimeRegistry;
use crate::engine::{judge, Engine, EngineRef, Paced, RequestHold, Settings, Verdict};
use crate::hook::{HookRequest, Hooks};
use crate::http::{named_policy, rejected_fields, FieldCache, Refusal};
use crate::limiter::request_rate::{FailureTicket, RateStatus};
use crate::limiter::Rejection;
use crate::rng::SplitMix64;
use crate::store::Held;
use crate::tier::Tier;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use http_body::Body;
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const PLAN: HeaderName = HeaderName::from_static("brownout-plan");
const TEST_MODE: HeaderName = HeaderName::from_static(TEST_MODE_HEADER);
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

thread_local! {
    /// The layer's random stream on this thread.
    static RNG: Cell<Option<SplitMix64>> = const { Cell::new(None) };
    /// The RateLimit fields written on this thread (the settings' policies, the last field).
    static FIELDS: RefCell<FieldCache<HeaderValue>> = RefCell::default();
}

/// brownout as a tower [`Layer`](tower_layer::Layer); made by
/// [`Brownout::layer`](crate::Brownout::layer).
#[derive(Clone)]
pub struct BrownoutLayer {
    engine: Arc<Engine>,
    hooks: Hooks,
    runtimes: Arc<RuntimeRegistry>,
}

impl BrownoutLayer {
    pub(crate) fn new(engine: Arc<Engine>, hooks: Hooks, runtimes: Arc<RuntimeRegistry>) -> Self {
        Self {
            engine,
            hooks,
            runtimes,
        }
    }
}

impl<S> tower_layer::Layer<S> for BrownoutLayer {
    type Service = BrownoutTower<S>;

    fn layer(&self, inner: S) -> BrownoutTower<S> {
        BrownoutTower {
            inner,
            engine: self.engine.clone(),
            hooks: self.hooks.clone(),
            runtimes: self.runtimes.clone(),
        }
    }
}

/// The service [`BrownoutLayer`] wraps an app's in.
#[derive(Clone)]
pub struct BrownoutTower<S> {
    inner: S,
    engine: Arc<Engine>,
    /// The app's hooks (none: a clone copies nothing shared).
    hooks: Hooks,
    /// Where the `runtime` utilization source finds the app's runtime.
    runtimes: Arc<RuntimeRegistry>,
}

/// What a request let through leaves for its response: the RateLimit fields written at
/// decision time, and the failure quotas to count if the app answers with an error.
struct After {
    fields: [Option<HeaderValue>; 2],
    failures: Option<(Held, FailureTicket)>,
}

impl After {
    fn apply<B>(self, engine: &Engine, response: &mut Response<B>, grpc: bool) {
        insert_fields(response.headers_mut(), self.fields);
        if let Some((held, ticket)) = &self.failures {
            let status = grpc::http_status_of(response, grpc);
            crate::http::count_failure(engine, *held, ticket, status);
        }
    }
}

fn insert_fields(headers: &mut http::HeaderMap, [policy, value]: [Option<HeaderValue>; 2]) {
    if let Some(policy) = policy {
        headers.insert(RATELIMIT_POLICY, policy);
    }
    if let Some(value) = value {
        headers.insert(RATELIMIT, value);
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for BrownoutTower<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Body + Send + 'static,
    ResB::Data: From<Bytes>,
{
    type Response = Response<BrownoutBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // A guard, not an Arc clone: no shared count written per request.
        let settings = self.engine.settings().load();
        let peer = peer(&req);
        // The request as the app's hooks see it, only when there are hooks.
        let hook_request = self.hooks.any().then(|| HookRequest::http(&req, peer));
        let mut lines = None;
        let (classified, facts) =
            self.classify(&req, (peer, hook_request.as_ref()), &settings, &mut lines);
        let hooked_plan = hook_request
            .as_ref()
            .and_then(|h| self.hooks.plan(&self.engine, h));
        let grpc = grpc::is_grpc(req.headers());
        let header_plan = settings
            .classifier
            .trust_plan_header
            .then(|| req.headers().get(PLAN).and_then(|v| v.to_str().ok()))
            .flatten();
        let plan = hooked_plan.as_deref().or(header_plan);
        let request = crate::limiter::Request::classified(&classified, &facts, plan);
        // Fleet mode asks the shared store first: the decision waits for it.
        #[cfg(feature = "redis")]
        if self.engine.keyed().asks_first()
            && crate::engine::asks(&settings, &request, &self.engine.plan().load()).is_some()
        {
            // A round trip to Redis follows: a swap is nothing beside it.
            self.runtimes.register_shared();
            let plan = plan.map(str::to_owned);
            return later(
                &mut self.inner,
                &self.engine,
                req,
                (classified, plan, None),
                grpc,
            );
        }
        let verdict = RNG.with(|cell| {
            let mut rng = cell
                .take()
                .unwrap_or_else(|| first_on_thread(&self.engine, &self.runtimes));
            let verdict = judge(&self.engine, &settings, &request, (&mut rng, true), None);
            cell.set(Some(rng));
            verdict
        });
        // Held for its turn in its client's queue first (pacing).
        if let Verdict::Pace(paced) = &verdict {
            let plan = plan.map(str::to_owned);
            let waits = (classified, plan, Some(Box::new(**paced)));
            return later(&mut self.inner, &self.engine, req, waits, grpc);
        }
        let (engine, inner) = (&self.engine, &mut self.inner);
        answer(
            inner,
            engine,
            &settings,
            req,
            (classified.tier, grpc),
            verdict,
        )
    }
}

/// The response to a request whose decision waits: for the shared store, or for its turn
/// (`paced`). It calls `inner` as it stands; a clone takes its place.
fn later<S, ReqB, ResB>(
    inner: &mut S,
    engine: &Arc<Engine>,
    req: Request<ReqB>,
    (classified, plan, paced): (Classified, Option<String>, Option<Box<Paced>>),
    grpc: bool,
) -> ResponseFuture<S::Future, ResB, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Body + Send + 'static,
    ResB::Data: From<Bytes>,
{
    let clone = inner.clone();
    let inner = std::mem::replace(inner, clone);
    let settings = engine.settings().load_full();
    ResponseFuture::boxed(Box::pin(later::decide_later(
        inner,
        engine.clone(),
        settings,
        req,
        (classified, plan, paced),
        grpc,
    )))
}

/// This thread's random stream, made on its first request, when the `runtime` source also
/// learns its runtime. Out of line: it runs once per thread.
#[cold]
#[inline(never)]
fn first_on_thread(engine: &Engine, runtimes: &RuntimeRegistry) -> SplitMix64 {
    runtimes.register_shared();
    engine.random_stream()
}

/// What a request is answered with: the refusal, or the app's answer with its hold. (The
/// inner service is ready when the verdict lets the request through at once; a request that
/// waits calls a clone, made ready when its turn comes.)
fn answer<S, ReqB, ResB, P: EngineRef>(
    inner: &mut S,
    engine: &Arc<Engine>,
    settings: &Settings,
    req: Request<ReqB>,
    (tier, grpc): (Tier, bool),
    verdict: Verdict<'_, P>,
) -> ResponseFuture<S::Future, ResB, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Body + Send + 'static,
    ResB::Data: From<Bytes>,
{
    match verdict {
        Verdict::Reject(rejection, rate) => {
            ResponseFuture::refused(refused(settings, &rejection, rate.as_ref(), None, grpc))
        }
        // Where it cannot wait for its turn: refused, as `excess: refuse` would (the layer
        // waits before it answers, in `later.rs`).
        Verdict::Pace(paced) => {
            let (rejection, rate) = crate::http::refuse_paced(engine, &paced);
            ResponseFuture::refused(refused(settings, &rejection, rate.as_ref(), None, grpc))
        }
        Verdict::Allow(mut admission) => {
            let after = (admission.rate.is_some() || admission.failures.is_some()).then(|| After {
                fields: admission
                    .rate
                    .map_or([None, None], |status| allowed_fields(settings, &status)),
                failures: admission.failures.map(|t| (admission.held, t)),
            });
            if let Some(queued) = admission.queued.take() {
                let policy = queued
                    .refunded
                    .as_ref()
                    .and_then(|s| policy_field(settings, s));
                let outcome = admission.outcome;
                let mut hold = RequestHold::waiting(engine.clone(), tier, &mut admission);
                learn_route(&mut hold, engine, &req, tier, grpc);
                let clone = inner.clone();
                let inner = std::mem::replace(inner, clone);
                let waiting = Waiting {
                    tier,
                    grpc,
                    outcome,
                    hold,
                    after,
                    policy,
                };
                return ResponseFuture::boxed(Box::pin(wait(
                    inner,
                    engine.clone(),
                    req,
                    waiting,
                    queued,
                )));
            }
            // Nothing to give back, write or count once the app answers.
            if after.is_none() && settings.pass_through && admission.holds_nothing() {
                return ResponseFuture::passed(inner.call(req));
            }
            let mut hold = RequestHold::admit(engine.clone(), tier, &mut admission);
            learn_route(&mut hold, engine, &req, tier, grpc);
            ResponseFuture::allowed(inner.call(req), hold, after, engine.clone(), (tier, grpc))
        }
    }
}

/// The RateLimit fields of an allowed response for `status`, from this thread's cache.
fn allowed_fields(settings: &Settings, status: &RateStatus) -> [Option<HeaderValue>; 2] {
    FIELDS.with(|cell| {
        let Ok(mut cache) = cell.try_borrow_mut() else {
            return [None, None];
        };
        [
            cache.policy(settings, status),
            cache.allowed(settings, status),
        ]
    })
}

/// The `RateLimit-Policy` field for `status`, from this thread's cache.
fn policy_field(settings: &Settings, status: &RateStatus) -> Option<HeaderValue> {
    FIELDS.with(|cell| cell.try_borrow_mut().ok()?.policy(settings, status))
}

/// The response refusing a request for `rejection` (`rate`: its RateLimit fields, if any;
/// `policy`: its `RateLimit-Policy`, when already written).
fn refused<B>(
    settings: &Settings,
    rejection: &Rejection,
    rate: Option<&RateStatus>,
    policy: Option<HeaderValue>,
    grpc: bool,
) -> Response<BrownoutBody<B>> {
    let refusal = Refusal::of(rejection, named_policy(settings, rejection));
    let fields = rate.map(|status| {
        let policy = policy.or_else(|| policy_field(settings, status));
        rejected_fields(settings, policy, status, (rejection, refusal.retry_after))
    });
    let mut response = if grpc {
        grpc::refusal(rejection, &refusal)
    } else {
        problem(refusal)
    };
    if let Some(fields) = fields {
        insert_fields(response.headers_mut(), fields);
    }
    response
}

mod later;

/// `refusal` as HTTP answers it: its status, `Retry-After` and problem+json body.
fn problem<B>(refusal: Refusal) -> Response<BrownoutBody<B>> {
    let mut response = Response::new(BrownoutBody::refused(Bytes::from(refusal.body)));
    *response.status_mut() =
        StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(crate::http::PROBLEM_JSON),
    );
    headers.insert(RETRY_AFTER, HeaderValue::from(refusal.retry_after));
    response
}
