//! The layer's response body: the app's, keeping the request's hold until it ends (a body
//! streamed after the response head, a gRPC stream), fails or is dropped (the client hung
//! up); or a refusal's.

use crate::engine::RequestHold;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project! {
    /// The body of a response that went through [`BrownoutLayer`](super::BrownoutLayer): the
    /// app's, or a refusal's.
    pub struct BrownoutBody<B> {
        #[pin]
        inner: Inner<B>,
    }
}

pin_project! {
    #[project = InnerProj]
    enum Inner<B> {
        // The app's answer; the request counts as in flight until it ends.
        App {
            #[pin]
            body: B,
            hold: Option<RequestHold>,
        },
        // A refusal's problem+json (none for gRPC: its status is in the headers).
        Refused { bytes: Option<Bytes> },
    }
}

impl<B> BrownoutBody<B> {
    pub(super) fn app(body: B, hold: Option<RequestHold>) -> Self {
        Self {
            inner: Inner::App { body, hold },
        }
    }

    pub(super) fn refused(bytes: Bytes) -> Self {
        Self {
            inner: Inner::Refused {
                bytes: (!bytes.is_empty()).then_some(bytes),
            },
        }
    }
}

impl<B> Body for BrownoutBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().inner.project() {
            InnerProj::App { body, hold } => {
                let next = body.poll_frame(cx);
                if matches!(next, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
                    hold.take();
                }
                next
            }
            InnerProj::Refused { bytes } => {
                Poll::Ready(bytes.take().map(|b| Ok(Frame::data(B::Data::from(b)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::App { body, .. } => body.is_end_stream(),
            Inner::Refused { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::App { body, .. } => body.size_hint(),
            Inner::Refused { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}
