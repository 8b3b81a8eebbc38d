//! The layer's response future, and the wait of a request for adaptive_concurrency's room.

use super::{grpc, refused, After, BrownoutBody};
use crate::engine::{Engine, Queued, RequestHold};
use crate::http::{wait_for_room, Refusal};
use crate::metrics::Outcome;
use crate::route_class::RouteClass;
use crate::tier::Tier;
use http::header::HeaderValue;
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use std::future::Future;
use std::panic::catch_unwind;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;
use tower_service::Service;

pin_project! {
    /// The layer's response future: the app's answer with its hold, a ready refusal, or (boxed)
    /// a request waiting for adaptive_concurrency's room or the shared store.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

/// A boxed answer.
pub(super) type BoxedAnswer<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<BrownoutBody<B>>, E>> + Send>>;

pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        // Let through.
        Allowed {
            #[pin]
            fut: F,
            hold: Option<RequestHold>,
            after: Option<After>,
            engine: Arc<Engine>,
            grpc: bool,
            tier: Tier,
            // `limiters.deadline`: its timer, inline (no allocation), armed when the app does
            // not answer at once.
            #[pin]
            timer: Option<Sleep>,
            deadline: Deadline,
        },
        // Let through holding nothing, with nothing to write or count (`Settings::
        // pass_through`).
        Passed {
            #[pin]
            fut: F,
        },
        // Refused.
        Refused { response: Option<Response<BrownoutBody<B>>> },
        // Waiting (boxed: only under overload, or in fleet mode behind a network round trip).
        Boxed { fut: BoxedAnswer<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(super) fn allowed(
        fut: F,
        hold: RequestHold,
        after: Option<After>,
        engine: Arc<Engine>,
        (tier, grpc): (Tier, bool),
    ) -> Self {
        Self {
            state: State::Allowed {
                fut,
                hold: Some(hold),
                after,
                engine,
                grpc,
                tier,
                timer: None,
                deadline: Deadline::Unarmed,
            },
        }
    }

    /// The app's answer to a request that holds nothing, its body only wrapped.
    pub(super) fn passed(fut: F) -> Self {
        Self {
            state: State::Passed { fut },
        }
    }

    pub(super) fn refused(response: Response<BrownoutBody<B>>) -> Self {
        Self {
            state: State::Refused {
                response: Some(response),
            },
        }
    }

    pub(super) fn boxed(fut: BoxedAnswer<B, E>) -> Self {
        Self {
            state: State::Boxed { fut },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<BrownoutBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Allowed {
                fut,
                hold,
                after,
                engine,
                grpc,
                tier,
                mut timer,
                deadline,
            } => {
                let Poll::Ready(response) = fut.poll(cx) else {
                    let passed = std::task::ready!(waiting((timer, deadline), hold, engine, cx));
                    let refusal = Refusal::deadline(passed, *tier);
                    return Poll::Ready(Ok(if *grpc {
                        grpc::deadline(&refusal, *tier, passed)
                    } else {
                        super::problem(refusal)
                    }));
                };
                timer.set(None);
                // An error drops the hold with the future: the request is done.
                let mut response = response?;
                if let Some(after) = after.take() {
                    after.apply(engine, &mut response, *grpc);
                }
                let mut hold = hold.take();
                // The router's own answer to a method or path it has no handler for teaches no
                // route's service time (axum names the route even for a method it refuses).
                if let Some(h) = hold.as_mut().filter(|h| h.learns_latency()) {
                    if matches!(
                        response.status(),
                        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
                    ) {
                        h.set_route(RouteClass::unmatched(*tier));
                    }
                }
                Poll::Ready(Ok(response.map(|body| BrownoutBody::app(body, hold))))
            }
            StateProj::Passed { fut } => fut
                .poll(cx)
                .map_ok(|response| response.map(|body| BrownoutBody::app(body, None))),
            StateProj::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after completion"))),
            StateProj::Boxed { fut } => fut.as_mut().poll(cx),
        }
    }
}

/// Where an allowed request's `limiters.deadline` stands.
#[derive(Clone, Copy)]
pub(super) enum Deadline {
    /// The app has answered at once so far: no timer.
    Unarmed,
    /// The timer is armed for `after`; past it the request stops counting, and with `cancel`
    /// it is stopped.
    Armed { after: Duration, cancel: bool },
    /// Past it (or the timer could not be armed): the request runs on without a timer.
    Passed,
}

/// The app has not answered yet: arms the deadline's timer (once, for `limiters.deadline` as it
/// is then) and polls it. Past it the request stops counting; `Ready(after)` when it is also
/// to be stopped (`cancel`), the call's future then dropped with this one. Out of line: an app
/// that answers at once never comes here.
#[inline(never)]
fn waiting(
    (mut timer, deadline): (Pin<&mut Option<Sleep>>, &mut Deadline),
    hold: &mut Option<RequestHold>,
    engine: &Engine,
    cx: &mut Context<'_>,
) -> Poll<Duration> {
    if let Deadline::Unarmed = deadline {
        let settings = engine.settings().load();
        let limit = &settings.limiters.deadline;
        let (after, cancel) = (limit.after.get(), limit.cancel);
        // A runtime without timers panics here: the request then runs without a deadline.
        match catch_unwind(|| tokio::time::sleep(after)) {
            Ok(sleep) => {
                timer.set(Some(sleep));
                *deadline = Deadline::Armed { after, cancel };
            }
            Err(_) => {
                *deadline = Deadline::Passed;
                engine.fail_open("deadline", "panic", || {
                    "limiters.deadline: no timer in this runtime (build it with enable_time); the request runs without a deadline".into()
                });
            }
        }
    }
    let (Deadline::Armed { after, cancel }, Some(sleep)) = (*deadline, timer.as_mut().as_pin_mut())
    else {
        return Poll::Pending;
    };
    std::task::ready!(sleep.poll(cx));
    // Past the deadline: the request stops counting, once.
    timer.set(None);
    *deadline = Deadline::Passed;
    if let Some(hold) = hold.take() {
        hold.expire();
    }
    if cancel {
        Poll::Ready(after)
    } else {
        Poll::Pending
    }
}

/// What a waiting request is let through, or refused, with.
pub(super) struct Waiting {
    pub(super) tier: Tier,
    pub(super) grpc: bool,
    pub(super) outcome: Outcome,
    pub(super) hold: RequestHold,
    pub(super) after: Option<After>,
    /// The `RateLimit-Policy` of a refusal, when the RateLimit fields are on.
    pub(super) policy: Option<HeaderValue>,
}

/// Waits for adaptive_concurrency's room for at most `max_wait`, then answers as the app does,
/// or refuses the request as if at once.
pub(super) async fn wait<S, ReqB, ResB>(
    mut inner: S,
    engine: Arc<Engine>,
    req: Request<ReqB>,
    waiting: Waiting,
    queued: Box<Queued>,
) -> Result<Response<BrownoutBody<ResB>>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    let Waiting {
        tier,
        grpc,
        outcome,
        hold,
        after,
        policy,
    } = waiting;
    match wait_for_room(&engine, (tier, outcome), hold, queued).await {
        Ok(hold) => {
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            ResponseFuture::allowed(inner.call(req), hold, after, engine, (tier, grpc)).await
        }
        Err((rejection, refunded)) => {
            let settings = engine.settings().load();
            Ok(refused(
                &settings,
                &rejection,
                refunded.as_ref(),
                policy,
                grpc,
            ))
        }
    }
}
