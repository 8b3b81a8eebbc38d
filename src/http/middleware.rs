//! The actix middleware: classify, run the limiter chain, answer 429/503 or pass the request on.
//!
//! Each actix worker builds its own [`BrownoutService`] (with its own random generator); all of
//! them share the settings and plan through `ArcSwap`, so the allowed path takes no lock and
//! allocates nothing.

use super::body::{InFlightGuard, TrackedBody};
use super::response::rejection_response;
use crate::classify::{Classified, RequestFacts};
use crate::limiter::{decide, Verdict};
use crate::metrics::Outcome;
use crate::rng::{mix, SplitMix64};
use crate::runtime::{Settings, Shared};
use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderName, AUTHORIZATION};
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
        let instance = self.shared.instances.fetch_add(1, Ordering::Relaxed);
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
        let started = shared.clock.now();
        let settings = shared.settings.load();
        let request = self.classify(&req, &settings);
        let verdict = match self.rng.try_borrow_mut() {
            Ok(mut rng) => decide(shared, &settings, request, started, &mut rng),
            // Unreachable on a single-threaded worker; never fail the request over it.
            Err(_) => Verdict::Allow(Outcome::Allowed),
        };
        let elapsed = shared.clock.now().saturating_sub(started);
        shared.metrics.decision_seconds(elapsed.as_secs_f64());
        match verdict {
            Verdict::Reject(rejection) => {
                shared.metrics.request(request.tier, Outcome::Rejected);
                let response = req.into_response(rejection_response(&rejection));
                ResponseFuture::Rejected {
                    response: Some(response),
                }
            }
            Verdict::Allow(outcome) => {
                shared.metrics.request(request.tier, outcome);
                let guard = InFlightGuard::new(shared.in_flight.clone(), request.tier);
                ResponseFuture::Allowed {
                    fut: self.service.call(req),
                    guard: Some(guard),
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
            guard: Option<InFlightGuard>,
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
            ResponseFutureProj::Allowed { fut, guard } => {
                let response = std::task::ready!(fut.poll(cx))?;
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
