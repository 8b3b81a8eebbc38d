//! The actix middleware: classify, run the limiter chain, answer 429/503 or pass the request on.
//!
//! Each actix worker builds its own [`BrownoutService`] (with its own random generator); all of
//! them share the settings and plan through `ArcSwap`, so the allowed path takes no lock and
//! allocates nothing.

use super::after::RateFields;
use super::body::TrackedBody;
use super::later;
use super::ratelimit;
use super::respond::{respond, ResponseFuture};
use super::worker::Worker;
use crate::classify::{forwarded_lines, Classified, RequestFacts, MAX_FORWARDED_LINES};
use crate::control::RuntimeRegistry;
use crate::engine::{judge, Admission, Engine, Paced, Settings, Verdict, WorkerEngine};
use crate::hook::{HookRequest, Hooks};
use crate::limiter::request_rate::RateStatus;
use crate::limiter::Request;
use crate::rng::SplitMix64;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderName, HeaderValue, AUTHORIZATION};
use actix_web::Error;
use arc_swap::cache::Cache;
use arc_swap::ArcSwap;
use std::cell::RefCell;
use std::future::{ready, Ready};
use std::rc::Rc;
use std::sync::Arc;

const TEST_MODE: HeaderName = HeaderName::from_static(crate::classify::TEST_MODE_HEADER);
const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const PLAN: HeaderName = HeaderName::from_static("brownout-plan");

/// The middleware factory; made by [`Brownout::middleware`](crate::Brownout::middleware).
#[derive(Clone)]
pub struct BrownoutMiddleware {
    engine: Arc<Engine>,
    hooks: Hooks,
    /// The actix worker runtimes, where each worker registers its own (the `runtime` source).
    runtimes: Arc<RuntimeRegistry>,
}

impl BrownoutMiddleware {
    pub(crate) fn new(engine: Arc<Engine>, hooks: Hooks, runtimes: Arc<RuntimeRegistry>) -> Self {
        Self {
            engine,
            hooks,
            runtimes,
        }
    }
}

impl<S, B> Transform<S, ServiceRequest> for BrownoutMiddleware
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<TrackedBody<B>>>;
    type Error = Error;
    type Transform = BrownoutService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        // Runs once per worker, on the worker's runtime: the `runtime` source reads it.
        self.runtimes.register_current();
        let engine = self.engine.clone();
        ready(Ok(BrownoutService {
            service: Rc::new(service),
            rng: RefCell::new(engine.random_stream()),
            settings: RefCell::new(Cache::new(LiveSettings(engine.clone()))),
            worker: Rc::new(Worker::new(Rc::new(WorkerEngine(engine)))),
            hooks: self.hooks.clone(),
            fields: RefCell::default(),
        }))
    }
}

/// The per-worker middleware service.
pub struct BrownoutService<S> {
    service: Rc<S>,
    /// This worker's own: its handle on the engine (requests clone the `Rc`, not the `Arc`)
    /// and the boxes its response futures reuse.
    worker: Rc<Worker>,
    /// The app's hooks.
    hooks: Hooks,
    rng: RefCell<SplitMix64>,
    /// This worker's copy of the live settings, checked against the shared one with a plain
    /// load per request (an `ArcSwap` load takes two locked instructions).
    settings: RefCell<Cache<LiveSettings, Arc<Settings>>>,
    /// The RateLimit fields this worker wrote (its own copies).
    fields: RefCell<ratelimit::FieldCache<HeaderValue>>,
}

/// The engine's live settings, as [`Cache`] wants them.
struct LiveSettings(Arc<Engine>);

impl std::ops::Deref for LiveSettings {
    type Target = ArcSwap<Settings>;
    fn deref(&self) -> &ArcSwap<Settings> {
        self.0.settings().swap()
    }
}

/// A worker's RateLimit fields under the settings of one request.
struct WorkerFields<'a, S> {
    service: &'a BrownoutService<S>,
    settings: &'a Settings,
}

impl<S> RateFields for WorkerFields<'_, S> {
    fn policy(&self, status: &RateStatus) -> Option<HeaderValue> {
        let mut cache = self.service.fields.try_borrow_mut().ok()?;
        cache.policy(self.settings, status)
    }

    fn allowed(&self, status: &RateStatus) -> Option<HeaderValue> {
        match self.service.fields.try_borrow_mut() {
            Ok(mut cache) => cache.allowed(self.settings, status),
            Err(_) => ratelimit::allowed(&self.settings.rules, status),
        }
    }
}

impl<S> BrownoutService<S> {
    /// The response to a request whose decision waits: for the shared store, or for its
    /// turn (`paced`).
    fn later<B>(
        &self,
        req: ServiceRequest,
        classified: Classified,
        plan: Option<String>,
        paced: Option<Box<Paced>>,
    ) -> ResponseFuture<S::Future, B>
    where
        S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
        B: MessageBody + 'static,
    {
        let seed = self.rng.try_borrow_mut().map_or(0, |mut r| r.next_u64());
        ResponseFuture::Shared {
            fut: Box::pin(later::decide_later(later::Later {
                service: self.service.clone(),
                worker: self.worker.clone(),
                settings: self.worker.engine.settings().load_full(),
                req,
                classified,
                plan,
                paced,
                rng: SplitMix64::new(seed),
            })),
        }
    }

    /// The request's client and tier, and the facts they were read from (the limiters'
    /// request takes its method, path and preflight from them). `lines` holds the
    /// `X-Forwarded-For` lines, filled only when the header is trusted.
    fn classify<'r>(
        &self,
        req: &'r ServiceRequest,
        hooked: Option<&HookRequest<'_>>,
        settings: &Settings,
        lines: &'r mut Option<[&'r [u8]; MAX_FORWARDED_LINES]>,
    ) -> (Classified, RequestFacts<'r>) {
        let headers = req.headers();
        let forwarded: &[&[u8]] = if settings.classifier.trusts_forwarded_for() {
            let all = headers.get_all(FORWARDED_FOR);
            forwarded_lines(all.len(), all.map(HeaderValue::as_bytes), lines)
        } else {
            &[]
        };
        let mut facts = RequestFacts {
            method: req.method().as_str(),
            path: routed_path(req),
            authorization: headers.get(AUTHORIZATION).map(|v| v.as_bytes()),
            test_mode: headers.get(TEST_MODE).map(|v| v.as_bytes()),
            forwarded_for: forwarded,
            peer: req.peer_addr().map(|a| a.ip()),
            client: None,
            preflight: super::request::is_preflight(req),
            // Read once the app has answered (the router has not run yet).
            route: None,
        };
        let classified = self
            .hooks
            .classify(&self.worker.engine, settings, &mut facts, hooked);
        (classified, facts)
    }
}

/// The path actix routes on: percent-decoded except for `/`, `%` and `+` (so `%63` is `c` and
/// `%2F` stays encoded), which is what route patterns are matched against. Classifying on the
/// raw path would let `POST /v1/%63harges` reach the charges handler as an ordinary,
/// cheaper, unquoted request.
#[inline]
fn routed_path(req: &ServiceRequest) -> &str {
    req.match_info().as_str()
}

impl<S, B> Service<ServiceRequest> for BrownoutService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<TrackedBody<B>>>;
    type Error = Error;
    type Future = ResponseFuture<S::Future, B>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let engine = &*self.worker.engine;
        // Held for this call only (the app's service runs inside it, but never re-enters this
        // worker's middleware).
        let (mut cached, loaded);
        let settings: &Settings = match self.settings.try_borrow_mut() {
            Ok(cache) => {
                cached = cache;
                cached.load()
            }
            Err(_) => {
                loaded = engine.settings().load_full();
                &loaded
            }
        };
        // The request as the app's hooks see it, only when there are hooks.
        let hook_request = self
            .hooks
            .any()
            .then(|| HookRequest::actix(&req, routed_path(&req)));
        let mut lines = None;
        let (classified, facts) = self.classify(&req, hook_request.as_ref(), settings, &mut lines);
        let hooked = hook_request
            .as_ref()
            .and_then(|h| self.hooks.plan(engine, h));
        let header_plan = settings
            .classifier
            .trust_plan_header
            .then(|| req.headers().get(PLAN).and_then(|v| v.to_str().ok()))
            .flatten();
        let request = Request::classified(&classified, &facts, hooked.as_deref().or(header_plan));
        // Fleet mode asks the shared store first (local_first: the store is reconciled in
        // rounds, never asked per request): the decision waits for it.
        #[cfg(feature = "redis")]
        if engine.keyed().asks_first()
            && crate::engine::asks(settings, &request, &engine.plan().load()).is_some()
        {
            let plan = request.plan.map(str::to_owned);
            return self.later(req, classified, plan, None);
        }
        let mut verdict = match self.rng.try_borrow_mut() {
            Ok(mut rng) => judge(
                &self.worker.engine,
                settings,
                &request,
                (&mut rng, true),
                None,
            ),
            // Unreachable on a single-threaded worker; never fail the request over it.
            Err(_) => Verdict::Allow(Admission::new(crate::metrics::Outcome::Allowed)),
        };
        // Held for its turn in its client's queue first (pacing).
        // (Matched by reference: moved through a match, the verdict was copied once more on
        // every request.)
        if let Verdict::Pace(paced) = &verdict {
            let plan = request.plan.map(str::to_owned);
            return self.later(req, classified, plan, Some(Box::new(**paced)));
        }
        respond(
            &self.service,
            &self.worker,
            settings,
            req,
            classified.tier,
            &mut verdict,
            &WorkerFields {
                service: self,
                settings,
            },
        )
    }
}
