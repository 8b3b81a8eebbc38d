//! The tower layer's allowed path allocates nothing, as the actix middleware's does
//! (`tests/hot_path_alloc.rs`): a counting allocator compares the same requests through a bare
//! axum router and through the router with `Brownout::layer` (the difference is the layer's),
//! with the route learned from axum's `MatchedPath`. One test in this binary, so no other test
//! allocates concurrently.

mod common;
mod counting_alloc;

use axum::body::Body;
use axum::http::{Request, Response};
use axum::routing::get;
use axum::Router;
use http_body::Body as _;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower_service::Service;

#[global_allocator]
static GLOBAL: counting_alloc::Counting = counting_alloc::Counting;

const N: u64 = 2_000;

/// Every limiter enforcing with room to spare, RateLimit fields as `fields` says.
fn all_limiters(fields: bool) -> brownout::Config {
    let mut c = common::config();
    let l = &mut c.limiters;
    l.request_rate.mode = brownout::Mode::Enforce;
    l.request_rate.rate = 1e6;
    l.request_rate.burst = 1_000_000;
    l.request_rate.headers = fields;
    l.request_rate.costs.insert("GET /v1/items/{id}".into(), 2);
    l.concurrent_requests.mode = brownout::Mode::Enforce;
    l.fleet_usage.mode = brownout::Mode::Enforce;
    l.fleet_usage.capacity = 1000;
    c
}

#[tokio::test]
async fn the_layer_allocates_nothing_on_the_allowed_path() {
    for config in [common::config(), all_limiters(false), all_limiters(true)] {
        measure(config, false).await;
    }
    // An app that does not answer at once: the deadline's timer is armed, inline.
    measure(common::config(), true).await;
}

async fn measure(config: brownout::Config, pending: bool) {
    let rig = common::Rig::new(config);
    let handler = move || async move {
        if pending {
            tokio::task::yield_now().await;
        }
        "ok"
    };
    // `with_state` turns the handlers into routes once, as `axum::serve` does (else axum
    // does it on every call).
    let router = Router::new().route("/v1/items/{id}", get(handler));
    let bare = router.clone().layer(Passthrough).with_state(());
    let wrapped = router.layer(rig.brownout.layer()).with_state(());

    let mut counts = Vec::new();
    for round in 0..2 {
        for app_is_wrapped in [false, true] {
            let requests: Vec<_> = (0..N)
                .map(|i| {
                    Request::get(format!("/v1/items/{i}"))
                        .header("authorization", format!("Bearer sk_live_{round}_{i}"))
                        .body(Body::empty())
                        .unwrap()
                })
                .collect();
            let before = counting_alloc::allocations();
            for req in requests {
                let ok = if app_is_wrapped {
                    call(&mut wrapped.clone(), req).await
                } else {
                    call(&mut bare.clone(), req).await
                };
                assert!(ok);
            }
            let used = counting_alloc::allocations() - before;
            if round == 1 {
                counts.push(used);
            }
        }
    }
    let (bare_allocs, wrapped_allocs) = (counts[0], counts[1]);
    println!("allocations for {N} requests: bare {bare_allocs}, wrapped {wrapped_allocs}");
    assert!(
        wrapped_allocs <= bare_allocs,
        "the layer allocated {} times over {N} allowed requests",
        wrapped_allocs - bare_allocs
    );
}

/// Calls `app` with `req` and reads the answer's body to its end: whether it was a success.
async fn call(app: &mut Router, req: Request<Body>) -> bool {
    std::future::poll_fn(|cx| Service::<Request<Body>>::poll_ready(app, cx))
        .await
        .unwrap();
    let res = app.call(req).await.unwrap();
    let ok = res.status().is_success();
    let mut body = res.into_body();
    while let Some(frame) = http_body_util_free_frame(&mut body).await {
        assert!(frame);
    }
    ok
}

/// The next frame of `body` (whether it read without error), without a body utility crate.
async fn http_body_util_free_frame(body: &mut Body) -> Option<bool> {
    let mut pinned = std::pin::Pin::new(body);
    std::future::poll_fn(|cx| pinned.as_mut().poll_frame(cx))
        .await
        .map(|frame| frame.is_ok())
}

/// A layer that passes requests on and wraps the response body, doing nothing else: what any
/// layer that follows a response to its end (brownout's, tower-http's trace or metrics layers)
/// costs in an axum router. axum boxes each route's layered service, its future and the body a
/// layer returns; what brownout adds is the difference.
#[derive(Clone)]
struct Passthrough;

impl<S> tower_layer::Layer<S> for Passthrough {
    type Service = PassthroughService<S>;
    fn layer(&self, inner: S) -> PassthroughService<S> {
        PassthroughService(inner)
    }
}

#[derive(Clone)]
struct PassthroughService<S>(S);

impl<S, B> Service<Request<B>> for PassthroughService<S>
where
    S: Service<Request<B>, Response = Response<Body>>,
{
    type Response = Response<Wrapped>;
    type Error = S::Error;
    type Future = PassthroughFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        PassthroughFuture {
            fut: self.0.call(req),
        }
    }
}

pin_project_lite::pin_project! {
    struct PassthroughFuture<F> {
        #[pin]
        fut: F,
    }
}

impl<F, E> Future for PassthroughFuture<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Wrapped>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let res = std::task::ready!(self.project().fut.poll(cx))?;
        Poll::Ready(Ok(res.map(|body| Wrapped { body })))
    }
}

pin_project_lite::pin_project! {
    /// A body passed on frame by frame.
    struct Wrapped {
        #[pin]
        body: Body,
    }
}

impl http_body::Body for Wrapped {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
