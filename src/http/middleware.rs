//! The actix middleware: classify, run the limiter chain, answer 429/503 or pass the request on.
//!
//! Each actix worker builds its own [`BrownoutService`] (with its own random generator); all of
//! them share the settings and plan through `ArcSwap`, so the allowed path takes no lock and
//! allocates nothing.

use super::body::{TrackedBody, WorkerGuard};
use super::deadline::{DeadlinePassed, Expiry};
use super::ratelimit;
use super::response::{rejection_response, retry_after_secs};
use crate::classify::{Classified, ClientKey, RequestFacts, MAX_FORWARDED_LINES};
use crate::engine::{judge, Admission, RequestGuard, Settings, Verdict, WorkerEngine};
use crate::limiter::request_rate::{RateStatus, RateTicket};
use crate::limiter::Request;
use crate::limiter::{RatePolicy, Rejection};
use crate::rng::{mix, SplitMix64};
use crate::runtime::Brownout;
use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use actix_web::Error;
use arc_swap::cache::Cache;
use arc_swap::ArcSwap;
use pin_project_lite::pin_project;
use std::cell::RefCell;
use std::future::{ready, Future, Ready};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

const TEST_MODE: HeaderName = HeaderName::from_static(crate::classify::TEST_MODE_HEADER);
const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const PLAN: HeaderName = HeaderName::from_static("brownout-plan");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The middleware factory; made by [`Brownout::middleware`].
#[derive(Clone)]
pub struct BrownoutMiddleware {
    brownout: Brownout,
}

impl Brownout {
    /// The actix middleware; wrap your `App` with it.
    pub fn middleware(&self) -> BrownoutMiddleware {
        BrownoutMiddleware {
            brownout: self.clone(),
        }
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
        self.brownout.inner.runtimes.register_current();
        let engine = self.brownout.engine().clone();
        let instance = engine.rng_streams.fetch_add(1, Ordering::Relaxed);
        ready(Ok(BrownoutService {
            service,
            rng: RefCell::new(SplitMix64::new(engine.seed ^ mix(instance + 1))),
            settings: RefCell::new(Cache::new(LiveSettings(engine.clone()))),
            engine: Rc::new(WorkerEngine(engine)),
            brownout: self.brownout.clone(),
            policies: RefCell::new((0, Vec::new())),
        }))
    }
}

/// The per-worker middleware service.
pub struct BrownoutService<S> {
    service: S,
    /// This worker's handle on the engine: requests clone the `Rc`, not the `Arc`.
    engine: Rc<WorkerEngine>,
    /// The app's hooks.
    brownout: Brownout,
    rng: RefCell<SplitMix64>,
    /// This worker's copy of the live settings, checked against the shared one with a plain
    /// load per request (an `ArcSwap` load takes two locked instructions).
    settings: RefCell<Cache<LiveSettings, Arc<Settings>>>,
    /// `RateLimit-Policy` values of the live settings version, built on this worker: a
    /// response clones its own worker's copy, touching no cache line that other workers use.
    policies: RefCell<(u64, Vec<[HeaderValue; 2]>)>,
}

/// The engine's live settings, as [`Cache`] wants them.
struct LiveSettings(Arc<crate::engine::Engine>);

impl std::ops::Deref for LiveSettings {
    type Target = ArcSwap<Settings>;
    fn deref(&self) -> &ArcSwap<Settings> {
        &self.0.settings
    }
}

impl<S> BrownoutService<S> {
    /// The `RateLimit-Policy` value for `status` under `settings`.
    fn policy(&self, settings: &Settings, status: &RateStatus) -> Option<HeaderValue> {
        let mut cache = self.policies.try_borrow_mut().ok()?;
        if cache.0 != settings.version {
            *cache = (settings.version, ratelimit::policies(&settings.rules));
        }
        let plan = cache.1.get(usize::from(status.plan))?;
        Some(plan[usize::from(status.elastic)].clone())
    }

    fn classify(&self, req: &ServiceRequest, settings: &Settings) -> Classified {
        let headers = req.headers();
        // Every X-Forwarded-For line, kept on the stack (the last ones: entries are read from
        // the end), and only when the header is trusted.
        let mut lines: [&[u8]; MAX_FORWARDED_LINES] = [&[]; MAX_FORWARDED_LINES];
        let mut forwarded = 0;
        if settings.classifier.trusts_forwarded_for() {
            let all = headers.get_all(FORWARDED_FOR);
            let skip = all.len().saturating_sub(MAX_FORWARDED_LINES);
            for (slot, value) in lines.iter_mut().zip(all.skip(skip)) {
                *slot = value.as_bytes();
                forwarded += 1;
            }
        }
        let facts = RequestFacts {
            method: req.method().as_str(),
            path: routed_path(req),
            authorization: headers.get(AUTHORIZATION).map(|v| v.as_bytes()),
            test_mode: headers.get(TEST_MODE).map(|v| v.as_bytes()),
            forwarded_for: &lines[..forwarded],
            peer: req.peer_addr().map(|a| a.ip()),
            client: self.hooked_key(req),
        };
        let mut classified = settings.classifier.classify(&facts);
        if let Some(hook) = &self.brownout.inner.tier_hook {
            match catch_unwind(AssertUnwindSafe(|| hook(req))) {
                Ok(Some(tier)) => classified.tier = tier,
                Ok(None) => {}
                Err(_) => self.engine.fail_open("classifier", "panic", || {
                    "the tier hook panicked; using the built-in rules".to_owned()
                }),
            }
        }
        classified
    }

    /// The client named by the app's key hook (a panicking hook fails open to the built-in
    /// rule).
    fn hooked_key(&self, req: &ServiceRequest) -> Option<ClientKey> {
        let hook = self.brownout.inner.key_hook.as_ref()?;
        catch_unwind(AssertUnwindSafe(|| hook(req))).unwrap_or_else(|_| {
            self.engine.fail_open("classifier", "panic", || {
                "the key hook panicked; using the bearer key or IP".to_owned()
            });
            None
        })
    }

    /// The plan named by the app's hook (a panicking hook fails open to the default plan).
    fn hooked_plan(&self, req: &ServiceRequest) -> Option<Arc<str>> {
        let hook = self.brownout.inner.plan_hook.as_ref()?;
        catch_unwind(AssertUnwindSafe(|| hook(req))).unwrap_or_else(|_| {
            self.engine.fail_open("classifier", "panic", || {
                "the plan hook panicked; using the default plan".to_owned()
            });
            None
        })
    }
}

/// The path actix routes on: percent-decoded except for `/`, `%` and `+` (so `%63` is `c` and
/// `%2F` stays encoded), which is what route patterns are matched against. Classifying on the
/// raw path would let `POST /v1/%63harges` reach the charges handler as an ordinary,
/// cheaper, unquoted request.
fn routed_path(req: &ServiceRequest) -> &str {
    req.match_info().as_str()
}

/// The RateLimit fields for `status`: `RateLimit-Policy` and `RateLimit`; for a rejected
/// response, the ones consistent with its `Retry-After` (`rejected`: the rejection and its
/// Retry-After in seconds).
fn rate_fields(
    settings: &Settings,
    policy: Option<HeaderValue>,
    status: &RateStatus,
    rejected: Option<(&Rejection, u64)>,
) -> [Option<HeaderValue>; 2] {
    let rules = &settings.rules;
    let value = match rejected {
        None => ratelimit::allowed(rules, status),
        Some((rejection, secs)) => ratelimit::rejected(rules, status, rejection, secs),
    };
    [policy, value]
}

/// Adds the fields that [`rate_fields`] wrote.
fn insert_rate_fields(headers: &mut HeaderMap, [policy, value]: [Option<HeaderValue>; 2]) {
    if let Some(policy) = policy {
        headers.insert(RATELIMIT_POLICY, policy);
    }
    if let Some(value) = value {
        headers.insert(RATELIMIT, value);
    }
}

/// Work left for when the app has answered: the RateLimit fields (written down at decision
/// time, from what the limiter saw) and failure quotas.
pub struct AfterResponse {
    engine: Rc<WorkerEngine>,
    /// `RateLimit-Policy` and `RateLimit`.
    fields: [Option<HeaderValue>; 2],
    failures: Option<RateTicket>,
}

impl AfterResponse {
    fn new(
        engine: &Rc<WorkerEngine>,
        settings: &Settings,
        admission: &Admission<'_, Rc<WorkerEngine>>,
        policy: impl FnOnce(&RateStatus) -> Option<HeaderValue>,
    ) -> Option<Self> {
        (admission.rate.is_some() || admission.failures.is_some()).then(|| Self {
            engine: engine.clone(),
            fields: admission.rate.map_or([None, None], |status| {
                rate_fields(settings, policy(&status), &status, None)
            }),
            failures: admission.failures,
        })
    }

    fn apply<B>(self, response: &mut ServiceResponse<B>) {
        insert_rate_fields(response.headers_mut(), self.fields);
        if let Some(ticket) = &self.failures {
            let failed = response.status().is_client_error() || response.status().is_server_error();
            if failed {
                let at = self.engine.check_time(self.engine.clock.now());
                let settings = self.engine.settings.load();
                settings
                    .rules
                    .record_failure(&*self.engine.store, ticket, at.unix);
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
        let engine = &*self.engine;
        // Held for this call only (the app's service runs inside it, but never re-enters this
        // worker's middleware).
        let (mut cached, loaded);
        let settings: &Settings = match self.settings.try_borrow_mut() {
            Ok(cache) => {
                cached = cache;
                cached.load()
            }
            Err(_) => {
                loaded = engine.settings.load_full();
                &loaded
            }
        };
        let classified = self.classify(&req, settings);
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
            path: routed_path(&req),
            plan: hooked.as_deref().or(header_plan),
        };
        let verdict = match self.rng.try_borrow_mut() {
            Ok(mut rng) => judge(&self.engine, settings, &request, &mut rng),
            // Unreachable on a single-threaded worker; never fail the request over it.
            Err(_) => Verdict::Allow(Admission::new(crate::metrics::Outcome::Allowed)),
        };
        let tier = classified.tier;
        match verdict {
            Verdict::Reject(rejection, rate) => {
                let policy = match rejection.policy {
                    Some(RatePolicy::Quota(i)) => settings
                        .rules
                        .quotas
                        .get(usize::from(i))
                        .map(|q| q.name.as_str()),
                    Some(RatePolicy::PerIp) => Some("per_ip"),
                    None => None,
                };
                let mut response = rejection_response(&rejection, policy);
                if let Some(status) = &rate {
                    let secs = retry_after_secs(rejection.retry_after);
                    let policy = self.policy(settings, status);
                    let fields = rate_fields(settings, policy, status, Some((&rejection, secs)));
                    insert_rate_fields(response.headers_mut(), fields);
                }
                ResponseFuture::Rejected {
                    response: Some(req.into_response(response)),
                }
            }
            Verdict::Allow(admission) => {
                let after = AfterResponse::new(&self.engine, settings, &admission, |status| {
                    self.policy(settings, status)
                });
                let guard = RequestGuard::admit(self.engine.clone(), tier, admission);
                let deadline = &settings.limiters.deadline;
                let expiry = Expiry::new(deadline.after.get(), deadline.cancel);
                ResponseFuture::Allowed {
                    fut: self.service.call(req),
                    guard: Some(guard),
                    after,
                    deadline: None,
                    expiry: Some(expiry),
                    tier,
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
            guard: Option<WorkerGuard>,
            after: Option<AfterResponse>,
            // Armed when the app does not answer at once (a fast handler never touches the
            // timer), inline: no allocation.
            #[pin]
            deadline: Option<tokio::time::Sleep>,
            expiry: Option<Expiry>,
            tier: crate::tier::Tier,
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
            ResponseFutureProj::Allowed {
                fut,
                guard,
                after,
                mut deadline,
                expiry,
                tier,
            } => {
                let Poll::Ready(response) = fut.poll(cx) else {
                    let Some(due) = expiry.as_ref().map(|e| e.after) else {
                        return Poll::Pending;
                    };
                    if deadline.is_none() {
                        deadline.set(Some(tokio::time::sleep(due)));
                    }
                    let timer = deadline.as_pin_mut().expect("armed above");
                    std::task::ready!(timer.poll(cx));
                    // Past the deadline: the request stops counting, once.
                    let expired = expiry.take().expect("checked above");
                    if let Some(guard) = guard.take() {
                        guard.expire();
                    }
                    if !expired.cancel {
                        return Poll::Pending;
                    }
                    // Dropping this future (actix does, on the error) stops the handler.
                    return Poll::Ready(Err(DeadlinePassed::new(due, *tier).into()));
                };
                let mut response = response?;
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
