//! Speed of the limiters (criterion): a keyed weighted check over 100k keys beside governor
//! 0.10's `check_key_n` on its DashMap store, a hot single key, two threads, the whole
//! four-limiter decision for one request, and the middleware around an actix service against
//! the bare service (each limiter alone, then all four).
//!
//! `cargo bench --bench limiters`
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

use brownout::classify::RequestFacts;
use brownout::clock::{Clock, SystemClock};
use brownout::config::Config;
use brownout::limiter::gcra::Bucket;
use brownout::store::{MemoryStore, Store};
use brownout::{Brownout, Mode};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: usize = 100_000;
const COST: u32 = 2;

/// 100k well-spread u64 keys (what the classifier's hash produces).
fn keys() -> Vec<u64> {
    (0..KEYS as u64).map(brownout::rng::mix).collect()
}

/// Limits high enough that every check passes: we measure the bookkeeping, not rejections.
fn ours() -> (Arc<MemoryStore>, Bucket, SystemClock) {
    let store = Arc::new(MemoryStore::new(1_000_000, 0, 8));
    (store, Bucket::new(1e6, 1e6, 0.0), SystemClock::new())
}

fn theirs() -> DefaultKeyedRateLimiter<u64> {
    let n = NonZeroU32::new(1_000_000).unwrap();
    RateLimiter::keyed(Quota::per_second(n).allow_burst(n))
}

fn ours_check(store: &MemoryStore, bucket: &Bucket, clock: &SystemClock, key: u64) {
    let now = clock.now().as_micros() as u64;
    let charge = store.rate_charge(key, now, bucket.increment(COST), bucket.tolerance());
    black_box(charge.unwrap());
}

fn keyed(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("keyed_weighted_check_100k_keys");
    g.throughput(Throughput::Elements(1));
    let (store, bucket, clock) = ours();
    let mut i = 0;
    g.bench_function("brownout", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            ours_check(&store, &bucket, &clock, keys[i]);
        })
    });
    // The same keys in a table sized for them (max_keys: 131072, 2 MiB) instead of the
    // default million (16 MiB): the difference is cache misses.
    let sized = MemoryStore::new(131_072, 0, 8);
    let mut i = 0;
    g.bench_function("brownout_max_keys_131072", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            ours_check(&sized, &bucket, &clock, keys[i]);
        })
    });
    let gov = theirs();
    let n = NonZeroU32::new(COST).unwrap();
    let mut i = 0;
    g.bench_function("governor_dashmap", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(gov.check_key_n(&keys[i], n).unwrap().is_ok());
        })
    });
    g.finish();

    let mut g = c.benchmark_group("hot_single_key");
    g.throughput(Throughput::Elements(1));
    g.bench_function("brownout", |b| {
        b.iter(|| ours_check(&store, &bucket, &clock, 42))
    });
    g.bench_function("governor_dashmap", |b| {
        b.iter(|| black_box(gov.check_key_n(&42, n).unwrap().is_ok()))
    });
    g.finish();
}

/// Two threads, each doing `iters` checks; the time per check is wall time / iters.
fn two_threads(c: &mut Criterion) {
    let keys = Arc::new(keys());
    let mut g = c.benchmark_group("two_threads");
    g.throughput(Throughput::Elements(1));
    for (name, spread) in [("one_key", 1usize), ("100k_keys", KEYS)] {
        let (store, bucket, clock) = ours();
        let ks = keys.clone();
        g.bench_function(format!("brownout_{name}"), |b| {
            b.iter_custom(|iters| {
                run_pair(iters, |t, j| {
                    let key = ks[(j as usize * 2 + t) % spread];
                    ours_check(&store, &bucket, &clock, key);
                })
            })
        });
        let gov = theirs();
        let ks = keys.clone();
        let n = NonZeroU32::new(COST).unwrap();
        g.bench_function(format!("governor_{name}"), |b| {
            b.iter_custom(|iters| {
                run_pair(iters, |t, j| {
                    let key = ks[(j as usize * 2 + t) % spread];
                    black_box(gov.check_key_n(&key, n).unwrap().is_ok());
                })
            })
        });
    }
    g.finish();
}

fn run_pair(iters: u64, f: impl Fn(usize, u64) + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..2 {
            let f = &f;
            s.spawn(move || (0..iters).for_each(|j| f(t, j)));
        }
    });
    start.elapsed()
}

/// A GET of one item by the client with API key `auth`.
fn facts<'a>(auth: &'a str, peer: Option<std::net::IpAddr>) -> RequestFacts<'a> {
    RequestFacts {
        method: "GET",
        path: "/v1/items/it_123",
        authorization: Some(auth.as_bytes()),
        peer,
        ..RequestFacts::default()
    }
}

/// The whole decision for one request: classify, request_rate (with a cost table and a
/// quota), concurrent_requests, fleet_usage and worker_utilization, metrics, guards.
fn decision(c: &mut Criterion) {
    let mut config = Config::default();
    let l = &mut config.limiters;
    l.request_rate.mode = Mode::Enforce;
    l.request_rate.rate = 1e6;
    l.request_rate.burst = 1_000_000;
    l.request_rate.costs.insert("POST /v1/charges".into(), 5);
    l.request_rate.costs.insert("GET /v1/items/{id}".into(), 2);
    l.concurrent_requests.mode = Mode::Enforce;
    l.fleet_usage.mode = Mode::Enforce;
    l.fleet_usage.capacity = 1_000_000;
    let brownout = Brownout::builder(config.clone())
        .seed(1)
        .admin_token("bench")
        .build()
        .unwrap();
    let auth: Vec<String> = (0..KEYS).map(|i| format!("Bearer sk_live_{i}")).collect();
    let peer = Some("10.1.2.3".parse().unwrap());
    let mut g = c.benchmark_group("decision");
    g.throughput(Throughput::Elements(1));
    // Where the time goes: the default config (worker_utilization only), then one per-user
    // limiter at a time, all on one hot key.
    for (name, enable) in [
        ("only_worker_utilization", [false, false, false]),
        ("plus_request_rate", [true, false, false]),
        ("plus_concurrent_requests", [false, true, false]),
        ("plus_fleet_usage", [false, false, true]),
    ] {
        let mut partial = Config::default();
        let l = &mut partial.limiters;
        l.request_rate = brownout::config::RequestRateConfig {
            mode: if enable[0] { Mode::Enforce } else { Mode::Off },
            ..config.limiters.request_rate.clone()
        };
        l.concurrent_requests.mode = if enable[1] { Mode::Enforce } else { Mode::Off };
        l.fleet_usage.mode = if enable[2] { Mode::Enforce } else { Mode::Off };
        l.fleet_usage.capacity = 1_000_000;
        let b = Brownout::builder(partial)
            .seed(1)
            .admin_token("bench")
            .build()
            .unwrap();
        g.bench_function(format!("{name}_one_key"), |bench| {
            bench.iter(|| black_box(b.check(&facts(&auth[7], peer), None)))
        });
    }
    let mut i = 0;
    g.bench_function("all_four_limiters_100k_keys", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(brownout.check(&facts(&auth[i], peer), None));
        })
    });
    // One client: the same work with the keyed state in cache.
    g.bench_function("all_four_limiters_one_key", |b| {
        b.iter(|| black_box(brownout.check(&facts(&auth[7], peer), None)))
    });
    g.finish();
}

fn clock(c: &mut Criterion) {
    let clock = SystemClock::new();
    c.bench_function("clock/system_now", |b| b.iter(|| black_box(clock.now())));
    let a = std::sync::atomic::AtomicU64::new(0);
    c.bench_function("primitives/atomic_fetch_add", |b| {
        b.iter(|| black_box(a.fetch_add(1, std::sync::atomic::Ordering::Relaxed)))
    });
    let classifier = brownout::classify::Classifier::new(&Config::default().classifier, 1).unwrap();
    let peer = Some("10.1.2.3".parse().unwrap());
    c.bench_function("primitives/classify", |b| {
        b.iter(|| black_box(classifier.classify(black_box(&facts("Bearer sk_live_12345", peer)))))
    });
}

/// Calls `app` once with `request()` and checks the answer.
async fn get_ok<S, R, B>(app: &S, request: impl Fn() -> R)
where
    S: actix_web::dev::Service<
        R,
        Response = actix_web::dev::ServiceResponse<B>,
        Error = actix_web::Error,
    >,
{
    let res = actix_web::test::call_service(app, request()).await;
    assert!(res.status().is_success());
    black_box(res);
}

/// The middleware around a hello-world service, against the bare service (actix-web's own
/// `benches/service.rs` pattern): the difference is what brownout costs a request.
fn middleware(c: &mut Criterion) {
    use actix_web::{test, web, App, HttpResponse};
    let runner = actix_web::rt::System::new();
    let mut g = c.benchmark_group("middleware");
    g.throughput(Throughput::Elements(1));
    let ok = || async { HttpResponse::Ok().body("ok") };
    let get = || test::TestRequest::get().to_request();
    let bare = runner.block_on(test::init_service(App::new().route("/", web::get().to(ok))));
    g.bench_function("bare", |b| b.iter(|| runner.block_on(get_ok(&bare, get))));
    let limits = |enable: [bool; 4]| {
        let mut c = Config::default();
        let l = &mut c.limiters;
        let on = |yes: bool| if yes { Mode::Enforce } else { Mode::Off };
        l.request_rate.mode = on(enable[0]);
        l.request_rate.rate = 1e6;
        l.request_rate.burst = 1_000_000;
        l.concurrent_requests.mode = on(enable[1]);
        l.concurrent_requests.max_in_flight = 1_000_000;
        l.fleet_usage.mode = on(enable[2]);
        l.fleet_usage.capacity = 1_000_000;
        l.worker_utilization.mode = on(enable[3]);
        l.worker_utilization.capacity = 1_000_000;
        c
    };
    for (name, enable) in [
        ("request_rate", [true, false, false, false]),
        ("concurrent_requests", [false, true, false, false]),
        ("fleet_usage", [false, false, true, false]),
        ("worker_utilization", [false, false, false, true]),
        ("all_four", [true, true, true, true]),
    ] {
        let brownout = Brownout::builder(limits(enable))
            .seed(1)
            .admin_token("bench")
            .build()
            .unwrap();
        let app = runner.block_on(test::init_service(
            App::new()
                .wrap(brownout.middleware())
                .route("/", web::get().to(ok)),
        ));
        g.bench_function(name, |b| b.iter(|| runner.block_on(get_ok(&app, get))));
    }
    g.finish();
}

criterion_group!(benches, keyed, two_threads, decision, middleware, clock);
criterion_main!(benches);
