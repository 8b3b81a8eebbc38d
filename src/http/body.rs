//! A response body that holds the request's in-flight guard until the body is finished, fails,
//! or is dropped (the client went away).

use crate::limiter::concurrent_requests::ConcurrencyPermit;
use crate::limiter::fleet_usage::FleetPermit;
use crate::limiter::Admission;
use crate::runtime::Shared;
use crate::tier::Tier;
use actix_web::body::{BodySize, MessageBody};
use actix_web::web::Bytes;
use pin_project_lite::pin_project;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Everything an admitted request holds until its response is done: its place in the
/// in-flight count and its limiter permits, all released on drop. One `Arc` keeps them alive.
pub struct RequestGuard {
    shared: Arc<Shared>,
    tier: Tier,
    concurrency: Option<u64>,
    fleet: bool,
}

impl std::fmt::Debug for RequestGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestGuard")
            .field("tier", &self.tier)
            .field("concurrency", &self.concurrency.is_some())
            .field("fleet", &self.fleet)
            .finish()
    }
}

impl RequestGuard {
    /// Enters the in-flight count of `tier` and takes over the admission's permits.
    pub(crate) fn admit(shared: &Arc<Shared>, tier: Tier, admission: Admission<'_>) -> Self {
        shared.in_flight.enter(tier);
        Self {
            shared: shared.clone(),
            tier,
            concurrency: admission.concurrency.map(ConcurrencyPermit::keep),
            fleet: admission.fleet.map(FleetPermit::keep).is_some(),
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.shared.in_flight.leave(self.tier);
        if let Some(key) = self.concurrency {
            self.shared.store.concurrency_release(key);
        }
        if self.fleet {
            self.shared.store.fleet_release();
        }
    }
}

pin_project! {
    /// The wrapped app's body, releasing its guard at the end of the stream.
    pub struct TrackedBody<B> {
        #[pin]
        body: B,
        guard: Option<RequestGuard>,
    }
}

impl<B> TrackedBody<B> {
    pub(crate) fn new(body: B, guard: Option<RequestGuard>) -> Self {
        Self { body, guard }
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
            this.guard.take();
        }
        next
    }

    fn try_into_bytes(self) -> Result<Bytes, Self> {
        let TrackedBody { body, guard } = self;
        // A body that is already complete releases the guard with it.
        body.try_into_bytes()
            .map_err(|body| TrackedBody { body, guard })
    }
}
