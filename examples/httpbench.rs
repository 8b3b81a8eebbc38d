//! `httpbench`: a hello-world actix app served bare, behind brownout, or behind actix-governor,
//! for measuring what the middleware costs a request (an HTTP load generator such as wrk
//! against each mode in turn, on the same machine).
//!
//! ```sh
//! httpbench serve --mode bare|bare-fields|brownout|brownout-nohdr|brownout-wu|brownout-rate|governor --port 8080 --workers 4
//! httpbench calls --mode bare|bare-fields|brownout|brownout-nohdr|brownout-wu|brownout-rate|governor --requests 2000
//! ```
//!
//! `calls` sends `--requests` requests through the same app in process
//! (`actix_web::test::call_service`, no sockets), for counting instructions per request under
//! callgrind with collection on only in `served`, then only in `done` (see `served`), each
//! total divided by the requests.
//!
//! `GET /` answers 200 `ok`. `brownout`: all four limiters enforcing, every threshold out of
//! reach; `bare-fields`: the bare app whose handler adds two header fields shaped like
//! brownout's RateLimit fields (what actix itself charges for two fields, the floor under
//! `brownout` minus `brownout-nohdr`); `brownout-nohdr`: the same without the RateLimit fields (`request_rate.headers: false`,
//! as actix-governor sends none by default); `brownout-wu`: only worker_utilization (the defaults); `governor`: actix-governor keyed
//! by peer IP, with a quota out of reach. On SIGTERM or SIGINT the brownout modes print one
//! stderr line, `httpbench: brownout counters: …`, with the request outcomes, rejections and
//! fail-opens (all but `allowed` must be 0 for the run to count).

use actix_governor::{Governor, GovernorConfigBuilder};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{web, App, HttpResponse, HttpServer};
use brownout::config::HumanDuration;
use brownout::{Brownout, Config, Mode};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Bench {
    Bare,
    BareFields,
    Brownout,
    BrownoutNoHeaders,
    BrownoutWu,
    /// request_rate alone (per key, no per-IP ceiling, fields off): governor's job.
    BrownoutRate,
    Governor,
}

struct Args {
    /// `serve` (false) or `calls` (true).
    calls: bool,
    mode: Bench,
    port: u16,
    workers: usize,
    requests: usize,
}

fn usage() -> ! {
    eprintln!(
        "usage: httpbench serve --mode bare|bare-fields|brownout|brownout-nohdr|brownout-wu|brownout-rate|governor --port P --workers N\n       httpbench calls --mode MODE --requests N"
    );
    std::process::exit(2)
}

fn args() -> Args {
    let mut argv = std::env::args().skip(1);
    let calls = match argv.next().as_deref() {
        Some("serve") => false,
        Some("calls") => true,
        _ => usage(),
    };
    let mut a = Args {
        calls,
        mode: Bench::Bare,
        port: 8080,
        workers: 4,
        requests: 1000,
    };
    while let Some(flag) = argv.next() {
        let value = argv.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--mode" => {
                a.mode = match value.as_str() {
                    "bare" => Bench::Bare,
                    "bare-fields" => Bench::BareFields,
                    "brownout" => Bench::Brownout,
                    "brownout-nohdr" => Bench::BrownoutNoHeaders,
                    "brownout-wu" => Bench::BrownoutWu,
                    "brownout-rate" => Bench::BrownoutRate,
                    "governor" => Bench::Governor,
                    _ => usage(),
                }
            }
            "--port" => a.port = value.parse().unwrap_or_else(|_| usage()),
            "--workers" => a.workers = value.parse().unwrap_or_else(|_| usage()),
            "--requests" => a.requests = value.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    a
}

/// The configuration of a brownout mode: every limiter that is on can never say no here.
fn config(mode: Bench) -> Config {
    let all_four = matches!(mode, Bench::Brownout | Bench::BrownoutNoHeaders);
    let mut c = Config::default();
    let l = &mut c.limiters;
    let wu = &mut l.worker_utilization;
    wu.capacity = Some(1_000_000);
    wu.sample_interval = HumanDuration::from_secs(1);
    if mode == Bench::BrownoutRate {
        // The same job as actix-governor: a bucket per client key, nothing else.
        l.worker_utilization.mode = Mode::Off;
        l.adaptive_concurrency.mode = Mode::Off;
    }
    if all_four || mode == Bench::BrownoutRate {
        l.request_rate.mode = Mode::Enforce;
        l.request_rate.rate = 1e6;
        l.request_rate.burst = 1_000_000;
        l.request_rate.headers = mode == Bench::Brownout;
        // Like for like with governor (a bucket per key, nothing per address).
        l.request_rate.per_ip = brownout::config::PerIp::Off;
    }
    if all_four {
        l.concurrent_requests.mode = Mode::Enforce;
        l.concurrent_requests.max_in_flight = 1_000_000;
        l.fleet_usage.mode = Mode::Enforce;
        l.fleet_usage.capacity = 1_000_000;
    }
    c
}

/// actix-governor keyed by peer IP, with a quota out of reach.
fn governor_config() -> actix_governor::GovernorConfig<
    actix_governor::PeerIpKeyExtractor,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
> {
    GovernorConfigBuilder::default()
        .requests_per_second(1_000_000)
        .burst_size(1_000_000)
        .finish()
        .expect("a valid quota")
}

/// The brownout counters line: outcomes summed over tiers, rejections and fail-opens.
fn counters(text: &str) -> String {
    let sum = |prefix: &str, needle: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix) && l.contains(needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let outcome = |o: &str| sum("brownout_requests_total{", &format!("outcome=\"{o}\""));
    format!(
        "allowed={} rejected={} dark_rejected={} failed_open={} rejections={} fail_opens={}",
        outcome("allowed"),
        outcome("rejected"),
        outcome("dark_rejected"),
        outcome("failed_open"),
        sum("brownout_rejections_total{", ""),
        sum("brownout_fail_open_total{", ""),
    )
}

async fn ok() -> HttpResponse {
    HttpResponse::Ok().body("ok")
}

const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

thread_local! {
    /// Two values shaped like brownout's RateLimit fields, each in a shared buffer as
    /// brownout's cached values are (a clone is a reference count, not a copy).
    static FIELDS: [HeaderValue; 2] = [
        "\"request_rate\";q=1000000;w=1",
        "\"request_rate\";r=999999;t=1",
    ]
    .map(|v| {
        HeaderValue::from_maybe_shared(actix_web::web::Bytes::copy_from_slice(v.as_bytes()))
            .expect("a valid header value")
    });
}

/// `ok` with the two fields added to the response as brownout adds them.
async fn ok_with_fields() -> HttpResponse {
    let mut response = HttpResponse::Ok().body("ok");
    FIELDS.with(|[policy, field]| {
        let headers = response.headers_mut();
        headers.insert(RATELIMIT_POLICY, policy.clone());
        headers.insert(RATELIMIT, field.clone());
    });
    response
}

/// `n` requests `GET /` from one client address through `app`, in process; every answer
/// must be 200.
async fn drive<S, B>(app: S, n: usize)
where
    S: actix_web::dev::Service<
        actix_http::Request,
        Response = actix_web::dev::ServiceResponse<B>,
        Error = actix_web::Error,
    >,
    B: actix_web::body::MessageBody,
{
    let peer = "192.0.2.7:40000".parse().expect("an address");
    for _ in 0..n {
        let req = actix_web::test::TestRequest::get()
            .uri("/")
            .peer_addr(peer)
            .to_request();
        let mut answer = Box::pin(actix_web::test::call_service(&app, req));
        let res = match served(answer.as_mut()) {
            std::task::Poll::Ready(res) => res,
            // Not here (every mode answers at once), but never wrong: wait for it.
            std::task::Poll::Pending => answer.await,
        };
        assert_eq!(res.status(), 200);
        done(res);
    }
}

/// One poll of a request's answer: everything from the call to the response, which these
/// apps give at once. Not inlined, so that callgrind can count only it
/// (`--toggle-collect='httpbench::served*'`), then only [`done`] in a second run
/// (`--toggle-collect='httpbench::done*'`; one toggle per run): the request's own
/// instructions, without the driver's, the periodic actors' or the runtime's in between.
#[inline(never)]
fn served<F: std::future::Future>(answer: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    answer.poll(&mut cx)
}

/// The response dropped: what a request leaves behind (brownout's guard gives its place back).
#[inline(never)]
fn done<T>(response: T) {
    drop(std::hint::black_box(response));
}

/// `calls`: the mode's app in process, `n` requests.
async fn calls(mode: Bench, n: usize) -> std::io::Result<()> {
    use actix_web::test::init_service;
    match mode {
        Bench::Bare => {
            drive(
                init_service(App::new().route("/", web::get().to(ok))).await,
                n,
            )
            .await
        }
        Bench::BareFields => {
            let app = App::new().route("/", web::get().to(ok_with_fields));
            drive(init_service(app).await, n).await
        }
        Bench::Governor => {
            let conf = governor_config();
            let app = App::new()
                .wrap(Governor::new(&conf))
                .route("/", web::get().to(ok));
            drive(init_service(app).await, n).await;
        }
        Bench::Brownout | Bench::BrownoutNoHeaders | Bench::BrownoutWu | Bench::BrownoutRate => {
            let brownout = Brownout::builder(config(mode))
                .admin_token("httpbench-admin-token")
                .build()
                .map_err(std::io::Error::other)?;
            brownout.start().map_err(std::io::Error::other)?;
            let app = App::new()
                .wrap(brownout.middleware())
                .route("/", web::get().to(ok));
            drive(init_service(app).await, n).await;
            brownout.shutdown().await;
        }
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let a = args();
    if a.calls {
        return actix_web::rt::System::new().block_on(calls(a.mode, a.requests));
    }
    actix_web::rt::System::new().block_on(async move {
        let addr = ("127.0.0.1", a.port);
        match a.mode {
            Bench::Bare => {
                HttpServer::new(|| App::new().route("/", web::get().to(ok)))
                    .workers(a.workers)
                    .bind(addr)?
                    .run()
                    .await
            }
            Bench::BareFields => {
                HttpServer::new(|| App::new().route("/", web::get().to(ok_with_fields)))
                    .workers(a.workers)
                    .bind(addr)?
                    .run()
                    .await
            }
            Bench::Governor => {
                let conf = governor_config();
                HttpServer::new(move || {
                    App::new()
                        .wrap(Governor::new(&conf))
                        .route("/", web::get().to(ok))
                })
                .workers(a.workers)
                .bind(addr)?
                .run()
                .await
            }
            Bench::Brownout
            | Bench::BrownoutNoHeaders
            | Bench::BrownoutWu
            | Bench::BrownoutRate => {
                let brownout = Brownout::builder(config(a.mode))
                    .admin_token("httpbench-admin-token")
                    .build()
                    .map_err(std::io::Error::other)?;
                brownout.start().map_err(std::io::Error::other)?;
                let b = brownout.clone();
                let served = HttpServer::new(move || {
                    App::new()
                        .wrap(b.middleware())
                        .route("/", web::get().to(ok))
                })
                .workers(a.workers)
                .bind(addr)?
                .run()
                .await;
                brownout.shutdown().await;
                eprintln!(
                    "httpbench: brownout counters: {}",
                    counters(&brownout.render_metrics())
                );
                served
            }
        }
    })
}
