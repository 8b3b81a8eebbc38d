//! `towerbench`: what a request costs through axum, bare or behind a rate-limiting layer, for
//! counting instructions per request under callgrind (`docs/benchmarks.md`).
//!
//! ```sh
//! towerbench --mode bare|governor|brownout-rate|brownout --requests 2000
//! ```
//!
//! Sends `--requests` requests `GET /` from one client address (axum's `ConnectInfo` in the
//! request's extensions, where both tower-governor and brownout read the peer) through an axum
//! router in process (no sockets). The router answers 200 `ok`. Modes:
//! - `bare`: the router alone;
//! - `governor`: behind tower-governor's layer, keyed by peer IP, with a quota out of reach (it
//!   writes no header fields by default);
//! - `brownout-rate`: behind `Brownout::layer` with request_rate alone (a bucket per client, out
//!   of reach, no RateLimit fields, nothing per address), every other limiter off: like for like
//!   with governor;
//! - `brownout`: behind `Brownout::layer` with the defaults (worker_utilization and
//!   adaptive_concurrency), the controller's capacity out of reach.
//!
//! Collection is meant to be on only in `served` (the call and the first poll of its answer),
//! then only in `done` (the response dropped), one toggle per run: the request's own
//! instructions, without the driver's, the actors' or the runtime's in between.

use axum::body::Body;
use axum::http::{Request, Response};
use axum::routing::get;
use axum::Router;
use brownout::config::HumanDuration;
use brownout::{Brownout, Config, Mode};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tower_service::Service;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bench {
    Bare,
    Governor,
    BrownoutRate,
    Brownout,
}

fn usage() -> ! {
    eprintln!("usage: towerbench --mode bare|governor|brownout-rate|brownout --requests N");
    std::process::exit(2)
}

fn args() -> (Bench, usize) {
    let (mut mode, mut requests) = (Bench::Bare, 1000);
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--mode" => {
                mode = match value.as_str() {
                    "bare" => Bench::Bare,
                    "governor" => Bench::Governor,
                    "brownout-rate" => Bench::BrownoutRate,
                    "brownout" => Bench::Brownout,
                    _ => usage(),
                }
            }
            "--requests" => requests = value.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    (mode, requests)
}

/// The configuration of a brownout mode: every limiter that is on can never say no here.
fn config(mode: Bench) -> Config {
    let mut c = Config::default();
    let l = &mut c.limiters;
    let wu = &mut l.worker_utilization;
    wu.capacity = Some(1_000_000);
    wu.sample_interval = HumanDuration::from_secs(1);
    if mode == Bench::BrownoutRate {
        l.worker_utilization.mode = Mode::Off;
        l.adaptive_concurrency.mode = Mode::Off;
        l.request_rate.mode = Mode::Enforce;
        l.request_rate.rate = 1e6;
        l.request_rate.burst = 1_000_000;
        l.request_rate.headers = false;
        l.request_rate.per_ip = brownout::config::PerIp::Off;
    }
    c
}

/// The router every mode serves (`with_state`, as `axum::serve` makes it: its handlers are
/// routes once, not on every call).
fn router() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

/// One call and one poll of its answer: everything from the request to the response, which
/// these apps give at once. Not inlined, so that callgrind can count only it
/// (`--toggle-collect='towerbench::served*'`).
#[inline(never)]
fn served<S>(
    app: &mut S,
    req: Request<Body>,
    answer: Pin<&mut Option<S::Future>>,
) -> Poll<Result<S::Response, S::Error>>
where
    S: Service<Request<Body>>,
{
    let mut answer = answer;
    answer.set(Some(app.call(req)));
    let mut cx = Context::from_waker(Waker::noop());
    match answer.as_pin_mut() {
        Some(fut) => fut.poll(&mut cx),
        None => Poll::Pending,
    }
}

/// The response dropped: what a request leaves behind (brownout's body gives its place back).
#[inline(never)]
fn done<T>(response: T) {
    drop(std::hint::black_box(response));
}

/// `n` requests `GET /` from one client address through `app`; every answer must be 200.
async fn drive<S, B>(mut app: S, n: usize)
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let peer: SocketAddr = "192.0.2.7:40000".parse().expect("an address");
    for _ in 0..n {
        let req = Request::get("/")
            .extension(axum::extract::ConnectInfo(peer))
            .body(Body::empty())
            .expect("a request");
        std::future::poll_fn(|cx| app.poll_ready(cx))
            .await
            .expect("ready");
        let mut answer = std::pin::pin!(None);
        let res = match served(&mut app, req, answer.as_mut()) {
            Poll::Ready(res) => res,
            // Not here (every mode answers at once), but never wrong: wait for it.
            Poll::Pending => match answer.as_mut().as_pin_mut() {
                Some(fut) => fut.await,
                None => unreachable!("served set the answer"),
            },
        }
        .expect("an answer");
        assert_eq!(res.status(), 200);
        done(res);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), brownout::Report> {
    let (mode, n) = args();
    match mode {
        Bench::Bare => drive(router().with_state(()), n).await,
        Bench::Governor => {
            let quota = tower_governor::governor::GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(1_000_000)
                .finish()
                .expect("a valid quota");
            let layer = tower_governor::GovernorLayer::new(quota);
            drive(router().layer(layer).with_state(()), n).await
        }
        Bench::BrownoutRate | Bench::Brownout => {
            let brownout = Brownout::builder(config(mode))
                .admin_token("towerbench-admin-token")
                .build()?;
            brownout.start()?;
            drive(router().layer(brownout.layer()).with_state(()), n).await;
            brownout.shutdown().await;
        }
    }
    Ok(())
}
