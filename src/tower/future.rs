//! The layer's response future, and the wait of a request for adaptive_concurrency's room.

use super::{refused, After, BrownoutBody};
use crate::engine::{Engine, Queued, RequestHold};
use crate::http::wait_for_room;
use crate::metrics::Outcome;
use crate::tier::Tier;
use http::header::HeaderValue;
use http::{Request, Response};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
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
        grpc: bool,
    ) -> Self {
        Self {
            state: State::Allowed {
                fut,
                hold: Some(hold),
                after,
                engine,
                grpc,
            },
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
            } => {
                // An error drops the hold with the future: the request is done.
                let mut response = std::task::ready!(fut.poll(cx))?;
                if let Some(after) = after.take() {
                    after.apply(engine, &mut response, *grpc);
                }
                let hold = hold.take();
                Poll::Ready(Ok(response.map(|body| BrownoutBody::app(body, hold))))
            }
            StateProj::Refused { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after completion"))),
            StateProj::Boxed { fut } => fut.as_mut().poll(cx),
        }
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
            ResponseFuture::allowed(inner.call(req), hold, after, engine, grpc).await
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
