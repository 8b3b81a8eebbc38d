//! A response body that keeps the request's in-flight hold until the body is finished, fails,
//! or is dropped (the client went away).

use crate::engine::{RequestHold, WorkerEngine};
use std::rc::Rc;

/// The hold of a request admitted by the middleware: it reaches the engine through its
/// worker's `Rc`.
pub(crate) type WorkerHold = RequestHold<Rc<WorkerEngine>>;
use actix_web::body::{BodySize, MessageBody};
use actix_web::web::Bytes;
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The wrapped app's body, releasing its hold at the end of the stream.
    pub struct TrackedBody<B> {
        #[pin]
        body: B,
        hold: Option<WorkerHold>,
    }
}

impl<B> TrackedBody<B> {
    pub(crate) fn new(body: B, hold: Option<WorkerHold>) -> Self {
        Self { body, hold }
    }
}

impl<B: MessageBody> MessageBody for TrackedBody<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = self.project();
        let next = this.body.poll_next(cx);
        if matches!(next, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.hold.take();
        }
        next
    }

    fn try_into_bytes(self) -> Result<Bytes, Self> {
        let TrackedBody { body, hold } = self;
        // A body that is already complete releases the hold with it.
        body.try_into_bytes()
            .map_err(|body| TrackedBody { body, hold })
    }
}
