//! What the middleware answers: the rejection or the app's response with its hold, the
//! RateLimit fields, and the failure quotas counted once the app has answered. A request
//! waiting for adaptive_concurrency's room (`queue`) holds its other limiters' permits while it
//! waits for at most `max_wait` (`post_max_wait` for a POST), then goes to the app, or is
//! refused with 503 (its request_rate credits given back), like a request refused at once.

use super::after::{insert_rate_fields, AfterResponse, RateFields};
use super::body::{TrackedBody, WorkerHold};
use super::deadline::DeadlinePassed;
use super::refusal::{named_policy, rejected_fields, retry_after_secs};
use super::response::rejection_response;
use super::room::wait_for_room;
use super::route::route_class;
use super::worker::{Timer, Worker};
use crate::engine::{EngineRef, Queued, RequestHold, Settings, Verdict};
use crate::limiter::request_rate::RateStatus;
use crate::limiter::Rejection;
use crate::metrics::Outcome;
use crate::tier::Tier;
use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse};
use actix_web::http::header::HeaderValue;
use actix_web::Error;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// The response to a verdict: the rejection (with its RateLimit fields), or the app's
/// response to an admitted request, which keeps its hold until the body ends.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(super) fn respond<S, B, Q>(
    service: &Rc<S>,
    worker: &Rc<Worker>,
    settings: &Settings,
    req: ServiceRequest,
    tier: Tier,
    verdict: &mut Verdict<'_, Q>,
    fields: &dyn RateFields,
) -> ResponseFuture<S::Future, B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
    Q: EngineRef,
{
    match verdict {
        Verdict::Reject(rejection, rate) => refused(settings, req, (rejection, *rate), fields),
        // Where it cannot wait for its turn: refused, as `excess: refuse` would (the
        // middleware waits before it answers, in `later.rs`).
        Verdict::Pace(paced) => {
            let (rejection, rate) = super::refuse_paced(&worker.engine, paced);
            refused(settings, req, (&rejection, rate), fields)
        }
        // By reference: moved out of the verdict, the admission was copied once more.
        Verdict::Allow(admission) => {
            let engine = &worker.engine;
            let after = AfterResponse::new(admission, fields);
            if let Some(queued) = admission.queued.take() {
                // Waiting for adaptive_concurrency's room (boxed: only under overload).
                let waiting = Waiting {
                    service: service.clone(),
                    req,
                    tier,
                    outcome: admission.outcome,
                    policy: queued.refunded.as_ref().and_then(|s| fields.policy(s)),
                    hold: RequestHold::waiting(engine.clone(), tier, admission),
                    after,
                    worker: worker.clone(),
                };
                return ResponseFuture::Shared {
                    fut: Box::pin(wait(waiting, queued)),
                };
            }
            // Nothing to give back, write or count once the app answers (`Settings::
            // pass_through`): the app's own future, its body only wrapped.
            if after.is_none() && settings.pass_through && admission.holds_nothing() {
                return ResponseFuture::Passed {
                    fut: service.call(req),
                };
            }
            let hold = RequestHold::admit(engine.clone(), tier, admission);
            ResponseFuture::allowed(service.call(req), hold, after, worker, tier)
        }
    }
}

/// The refusal of `req` for `rejection`, with its RateLimit fields (`rate`) if any. Out of
/// line: a refusal is not the allowed path.
#[inline(never)]
fn refused<F, B>(
    settings: &Settings,
    req: ServiceRequest,
    (rejection, rate): (&Rejection, Option<RateStatus>),
    fields: &dyn RateFields,
) -> ResponseFuture<F, B> {
    let mut response = rejection_response(rejection, named_policy(settings, rejection));
    if let Some(status) = &rate {
        let secs = retry_after_secs(rejection.retry_after);
        let written = rejected_fields(settings, fields.policy(status), status, (rejection, secs));
        insert_rate_fields(response.headers_mut(), written);
    }
    // Boxed: a rejection is not the allowed path, and inline it would make every response
    // future larger.
    ResponseFuture::Rejected {
        response: Some(Box::new(req.into_response(response))),
    }
}

impl<F, B> ResponseFuture<F, B> {
    /// The app's answer `fut` to a request let through, holding its hold.
    pub(super) fn allowed(
        fut: F,
        hold: WorkerHold,
        after: Option<AfterResponse>,
        worker: &Rc<Worker>,
        tier: Tier,
    ) -> Self {
        Self::Allowed {
            fut,
            hold: Some(hold),
            after: after.map(|after| worker.after(after)),
            deadline: DeadlineTimer::Unarmed,
            worker: worker.clone(),
            tier,
        }
    }
}

pin_project! {
    /// The middleware's response future: the app's response with a tracked body, or a ready
    /// rejection. An enum, not a box: no allocation per request.
    /// (Its fields are private in spirit: the app's future and hold, or the rejection.)
    #[project = ResponseFutureProj]
    #[allow(missing_docs)]
    pub enum ResponseFuture<F, B> {
        /// The request was let through.
        Allowed {
            #[pin]
            fut: F,
            hold: Option<WorkerHold>,
            // The work left for the response, and the deadline's timer (armed when the app
            // does not answer at once: a fast handler never touches it), in boxes the
            // worker reuses: inline, they made the future too large to move cheaply.
            after: Option<Box<Option<AfterResponse>>>,
            deadline: DeadlineTimer,
            worker: Rc<Worker>,
            tier: crate::tier::Tier,
        },
        /// The request was let through holding nothing, with nothing to write on its
        /// response, and nothing counts it in flight.
        Passed {
            #[pin]
            fut: F,
        },
        /// The request was rejected.
        Rejected {
            response: Option<Box<ServiceResponse<BoxBody>>>,
        },
        /// Fleet mode: the decision waits for the shared store (boxed: a network round trip
        /// dwarfs one allocation); or the request waits for adaptive_concurrency's room.
        Shared {
            fut: Pin<Box<dyn Future<Output = Result<ServiceResponse<EitherBody<TrackedBody<B>>>, Error>>>>,
        },
    }
    impl<F, B> PinnedDrop for ResponseFuture<F, B> {
        fn drop(this: Pin<&mut Self>) {
            // What was not given back on the way (a future dropped before its answer).
            if let ResponseFutureProj::Allowed { after, deadline, worker, .. } = this.project() {
                if let Some(after) = after.take() {
                    worker.give_after(after);
                }
                deadline.disarm(worker);
            }
        }
    }
}

/// Where an admitted request's deadline stands.
pub(super) enum DeadlineTimer {
    /// The app has answered at once so far: no timer.
    Unarmed,
    /// Its timer is armed; past it, the request is stopped (`cancel`) or only stops
    /// counting, as `limiters.deadline` said when it was armed.
    Armed {
        timer: Pin<Box<Timer>>,
        cancel: bool,
    },
    /// Past it: the request stopped counting and runs on without a timer.
    Passed,
}

impl DeadlineTimer {
    /// Gives an armed timer back to `worker` (the request is answered, or past it).
    #[inline]
    fn disarm(&mut self, worker: &Worker) {
        if let DeadlineTimer::Armed { .. } = self {
            self.give_back(worker);
        }
    }

    #[inline(never)]
    fn give_back(&mut self, worker: &Worker) {
        if let DeadlineTimer::Armed { timer, .. } = std::mem::replace(self, DeadlineTimer::Passed) {
            worker.give_timer(timer);
        }
    }
}

impl<F, B> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<ServiceResponse<B>, Error>>,
    B: MessageBody,
{
    type Output = Result<ServiceResponse<EitherBody<TrackedBody<B>>>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            ResponseFutureProj::Allowed {
                fut,
                hold,
                after,
                deadline,
                worker,
                tier,
            } => {
                let mut response = match fut.poll(cx) {
                    Poll::Ready(Ok(response)) => response,
                    Poll::Ready(Err(error)) => {
                        deadline.disarm(worker);
                        return Poll::Ready(Err(error));
                    }
                    Poll::Pending => return waiting(deadline, hold, (worker, *tier), cx),
                };
                deadline.disarm(worker);
                if let Some(mut boxed) = after.take() {
                    if let Some(after) = boxed.take() {
                        after.apply(&worker.engine, &mut response);
                    }
                    worker.give_after(boxed);
                }
                let mut hold = hold.take();
                if let Some(g) = hold.as_mut().filter(|g| g.learns_latency()) {
                    let routes = worker.engine.adaptive().routes();
                    g.set_route(route_class(
                        routes,
                        response.request(),
                        response.status(),
                        *tier,
                    ));
                }
                Poll::Ready(Ok(tracked(response, hold)))
            }
            ResponseFutureProj::Passed { fut } => {
                let response = std::task::ready!(fut.poll(cx))?;
                Poll::Ready(Ok(tracked(response, None)))
            }
            ResponseFutureProj::Rejected { response } => {
                let response = response
                    .take()
                    .expect("ResponseFuture polled after completion");
                Poll::Ready(Ok((*response).map_into_right_body()))
            }
            ResponseFutureProj::Shared { fut } => fut.as_mut().poll(cx),
        }
    }
}

/// The app's `response` with its body tracked by `hold` (taken apart and put together:
/// actix's `map_body` moved the response once more).
#[inline(always)]
fn tracked<B>(
    response: ServiceResponse<B>,
    hold: Option<WorkerHold>,
) -> ServiceResponse<EitherBody<TrackedBody<B>>> {
    let (req, response) = response.into_parts();
    let (head, body) = response.into_parts();
    let tracked = head.set_body(EitherBody::left(TrackedBody::new(body, hold)));
    ServiceResponse::new(req, tracked)
}

/// The app has not answered yet: the deadline's timer is armed (once, for
/// `limiters.deadline` as it is then) and polled; past it the request stops counting, and with
/// `cancel` it ends with an error (dropping the future, as actix does on the error, stops the
/// handler). Out of line: an app that answers at once never comes here, and the poll of one
/// that does stays small.
#[inline(never)]
fn waiting<T>(
    deadline: &mut DeadlineTimer,
    hold: &mut Option<WorkerHold>,
    (worker, tier): (&Worker, Tier),
    cx: &mut Context<'_>,
) -> Poll<Result<T, Error>> {
    if let DeadlineTimer::Unarmed = deadline {
        let settings = worker.engine.settings().load();
        let limit = &settings.limiters.deadline;
        *deadline = DeadlineTimer::Armed {
            timer: worker.timer(limit.after.get()),
            cancel: limit.cancel,
        };
    }
    let DeadlineTimer::Armed { timer, cancel } = deadline else {
        return Poll::Pending;
    };
    let cancel = *cancel;
    let after = std::task::ready!(timer.as_mut().poll_passed(cx));
    // Past the deadline: the request stops counting, once.
    deadline.disarm(worker);
    if let Some(hold) = hold.take() {
        hold.expire();
    }
    if !cancel {
        return Poll::Pending;
    }
    Poll::Ready(Err(DeadlinePassed::new(after, tier).into()))
}

/// Everything a waiting request is let through with.
struct Waiting<S> {
    service: Rc<S>,
    worker: Rc<Worker>,
    req: ServiceRequest,
    tier: Tier,
    /// Its outcome once let through (allowed, or one of the other limiters' dark or
    /// fail-open outcomes).
    outcome: Outcome,
    hold: WorkerHold,
    after: Option<AfterResponse>,
    /// The `RateLimit-Policy` of a refusal, when the RateLimit fields are on.
    policy: Option<HeaderValue>,
}

/// Waits for the slot, then answers as the app does, or refuses the request.
async fn wait<S, B>(
    waiting: Waiting<S>,
    queued: Box<Queued>,
) -> Result<ServiceResponse<EitherBody<TrackedBody<B>>>, Error>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error>,
    B: MessageBody,
{
    let Waiting {
        service,
        worker,
        req,
        tier,
        outcome,
        hold,
        after,
        policy,
    } = waiting;
    let engine = &worker.engine;
    let (rejection, refunded) = match wait_for_room(engine, (tier, outcome), hold, queued).await {
        Ok(hold) => {
            return ResponseFuture::allowed(service.call(req), hold, after, &worker, tier).await
        }
        Err(refused) => refused,
    };
    let settings = engine.settings().load_full();
    let mut response = rejection_response(&rejection, None);
    if let Some(status) = &refunded {
        let secs = retry_after_secs(rejection.retry_after);
        let fields = rejected_fields(&settings, policy, status, (&rejection, secs));
        insert_rate_fields(response.headers_mut(), fields);
    }
    Ok(req.into_response(response).map_into_right_body())
}
