//! The actix middleware: classify, run the limiter chain, answer 429/503 or pass the request on.
//!
//! Each actix worker builds its own [`BrownoutService`] (with its own random generator); all of
//! them share the settings and plan through `ArcSwap`, so the allowed path takes no lock and
//! allocates nothing.

use super::body::{RequestGuard, TrackedBody};
use super::response::rejection_response;
use crate::classify::{Classified, RequestFacts};
use crate::limiter::request_rate::{RateStatus, RateTicket};
use crate::limiter::{Admission, Request, Verdict};
use crate::rng::{mix, SplitMix64};
use crate::runtime::{Settings, Shared};
use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderMap, HeaderName, AUTHORIZATION};
use actix_web::Error;
use pin_project_lite::pin_project;
use std::cell::RefCell;
use std::future::{ready, Future, Ready};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

const TEST_MODE: HeaderName = HeaderName::from_static(crate::classify::TEST_MODE_HEADER);
const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const PLAN: HeaderName = HeaderName::from_static("brownout-plan");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The middleware factory; made by [`Brownout::middleware`](crate::Brownout::middleware).
#[derive(Clone)]
pub struct BrownoutMiddleware {
    shared: Arc<Shared>,
}

impl BrownoutMiddleware {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl<S, B> Transform<S, ServiceRequest> for BrownoutMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody,
{
    type Response = ServiceResponse<EitherBody<TrackedBody<B>>>;
    type Error = Error;
    type Transform = BrownoutService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        // Runs once per worker, on the worker's runtime: the `runtime` source reads it.
        self.shared.runtimes.register_current();
        let instance = self.shared.rng_streams.fetch_add(1, Ordering::Relaxed);
        ready(Ok(BrownoutService {
            service,
            shared: self.shared.clone(),
            rng: RefCell::new(SplitMix64::new(self.shared.seed ^ mix(instance + 1))),
        }))
    }
}

/// The per-worker middleware service.
pub struct BrownoutService<S> {
    service: S,
    shared: Arc<Shared>,
    rng: RefCell<SplitMix64>,
}

impl<S> BrownoutService<S> {
    fn classify(&self, req: &ServiceRequest, settings: &Settings) -> Classified {
        let headers = req.headers();
        let facts = RequestFacts {
            method: req.method().as_str(),
            path: req.path(),
            authorization: headers.get(AUTHORIZATION).map(|v| v.as_bytes()),
            test_mode: headers.get(TEST_MODE).map(|v| v.as_bytes()),
            forwarded_for: headers.get(FORWARDED_FOR).map(|v| v.as_bytes()),
            peer: req.peer_addr().map(|a| a.ip()),
        };
        let mut classified = settings.classifier.classify(&facts);
        if let Some(hook) = &self.shared.tier_hook {
            match catch_unwind(AssertUnwindSafe(|| hook(req))) {
                Ok(Some(tier)) => classified.tier = tier,
                Ok(None) => {}
                Err(_) => self.shared.fail_open("classifier", "panic", || {
                    "the tier hook panicked; using the built-in rules".to_owned()
                }),
            }
        }
        classified
    }

    /// The plan named by the app's hook (a panicking hook fails open to the default plan).
    fn hooked_plan(&self, req: &ServiceRequest) -> Option<Arc<str>> {
        let hook = self.shared.plan_hook.as_ref()?;
        catch_unwind(AssertUnwindSafe(|| hook(req))).unwrap_or_else(|_| {
            self.shared.fail_open("classifier", "panic", || {
                "the plan hook panicked; using the default plan".to_owned()
            });
            None
        })
    }
}

/// Adds the RateLimit fields for `status`.
fn rate_headers(settings: &Settings, status: &RateStatus, headers: &mut HeaderMap) {
    let rules = &settings.rules;
    headers.insert(
        RATELIMIT_POLICY,
        rules.plan_at(usize::from(status.plan)).policy[usize::from(status.elastic)].clone(),
    );
    if let Some(value) = rules.rate_limit_header(status) {
        headers.insert(RATELIMIT, value);
    }
}

/// Work left for when the app has answered: the RateLimit fields and failure quotas.
pub struct AfterResponse {
    shared: Arc<Shared>,
    rate: Option<RateStatus>,
    failures: Option<RateTicket>,
}

impl AfterResponse {
    fn new(shared: &Arc<Shared>, admission: &Admission) -> Option<Self> {
        (admission.rate.is_some() || admission.failures.is_some()).then(|| Self {
            shared: shared.clone(),
            rate: admission.rate,
            failures: admission.failures,
        })
    }

    fn apply<B>(self, response: &mut ServiceResponse<B>) {
        let settings = self.shared.settings.load();
        if let Some(status) = &self.rate {
            rate_headers(&settings, status, response.headers_mut());
        }
        if let Some(ticket) = &self.failures {
            let failed = response.status().is_client_error() || response.status().is_server_error();
            if failed {
                let now = self.shared.clock.now().as_micros() as u64;
                settings
                    .rules
                    .record_failure(&*self.shared.store, ticket, now);
            }
        }
    }
}

impl<S, B> Service<ServiceRequest> for BrownoutService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody,
{
    type Response = ServiceResponse<EitherBody<TrackedBody<B>>>;
    type Error = Error;
    type Future = ResponseFuture<S::Future>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let shared = &*self.shared;
        let settings = shared.settings.load();
        let classified = self.classify(&req, &settings);
        let hooked = self.hooked_plan(&req);
        let header_plan = settings
            .classifier
            .trust_plan_header
            .then(|| req.headers().get(PLAN).and_then(|v| v.to_str().ok()))
            .flatten();
        let request = Request {
            tier: classified.tier,
            key: classified.key,
            ip: classified.ip,
            method: req.method().as_str(),
            path: req.path(),
            plan: hooked.as_deref().or(header_plan),
        };
        let verdict = match self.rng.try_borrow_mut() {
            Ok(mut rng) => shared.judge(&settings, &request, &mut rng),
            // Unreachable on a single-threaded worker; never fail the request over it.
            Err(_) => Verdict::Allow(Admission::default()),
        };
        let tier = classified.tier;
        match verdict {
            Verdict::Reject(rejection, rate) => {
                let quota = rejection
                    .quota
                    .and_then(|i| settings.rules.quotas.get(usize::from(i)))
                    .map(|q| q.name.as_str());
                let mut response = rejection_response(&rejection, quota);
                if let Some(status) = &rate {
                    rate_headers(&settings, status, response.headers_mut());
                }
                ResponseFuture::Rejected {
                    response: Some(req.into_response(response)),
                }
            }
            Verdict::Allow(admission) => {
                let after = AfterResponse::new(&self.shared, &admission);
                let guard = RequestGuard::admit(&self.shared, tier, admission);
                ResponseFuture::Allowed {
                    fut: self.service.call(req),
                    guard: Some(guard),
                    after,
                }
            }
        }
    }
}

pin_project! {
    /// The middleware's response future: the app's response with a tracked body, or a ready
    /// rejection. An enum, not a box: no allocation per request.
    /// (Its fields are private in spirit: the app's future and guard, or the rejection.)
    #[project = ResponseFutureProj]
    #[allow(missing_docs)]
    pub enum ResponseFuture<F> {
        /// The request was let through.
        Allowed {
            #[pin]
            fut: F,
            guard: Option<RequestGuard>,
            after: Option<AfterResponse>,
        },
        /// The request was rejected.
        Rejected {
            response: Option<ServiceResponse<BoxBody>>,
        },
    }
}

impl<F, B> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ServiceResponse<B>, Error>>,
    B: MessageBody,
{
    type Output = Result<ServiceResponse<EitherBody<TrackedBody<B>>>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::Allowed { fut, guard, after } => {
                let mut response = std::task::ready!(fut.poll(cx))?;
                if let Some(after) = after.take() {
                    after.apply(&mut response);
                }
                let guard = guard.take();
                Poll::Ready(Ok(response.map_body(|_, body| {
                    EitherBody::left(TrackedBody::new(body, guard))
                })))
            }
            ResponseFutureProj::Rejected { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after completion")
                .map_into_right_body())),
        }
    }
}
