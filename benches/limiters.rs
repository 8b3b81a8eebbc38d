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
use brownout::limiter::LimiterName;
use brownout::store::{MemoryStore, Store};
use brownout::{Brownout, Decision, Mode};
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
/// Over 100k keys a million credits a second is plenty (each key comes back every few ms);
/// one hot key checked every few ns needs a billion (a charge then rounds to 0 µs, which
/// passes through the same code). The burst is one second's worth of credits, so a thread
/// preempted between reading the clock and charging is not refused either.
fn ours(rate: f64) -> (Arc<MemoryStore>, Bucket, SystemClock) {
    let store = Arc::new(memory_store(1_000_000, 8));
    (store, Bucket::new(rate, rate, 0.0), SystemClock::new())
}

/// governor with the same limits: one credit every `per_credit`, a second's worth of burst.
fn theirs(per_credit: Duration) -> DefaultKeyedRateLimiter<u64> {
    let per_second = Duration::from_secs(1).as_nanos() / per_credit.as_nanos();
    let burst = NonZeroU32::new(u32::try_from(per_second).unwrap()).unwrap();
    RateLimiter::keyed(Quota::with_period(per_credit).unwrap().allow_burst(burst))
}

const SPREAD_RATE: f64 = 1e6;
const HOT_RATE: f64 = 1e9;

fn ours_check(store: &MemoryStore, bucket: &Bucket, clock: &SystemClock, key: u64) {
    let now = clock.now().as_micros() as u64;
    let charge = store.gcra(
        LimiterName::RequestRate.table(0),
        key,
        now,
        bucket.charging(COST),
    );
    assert!(
        matches!(charge, Ok(brownout::limiter::gcra::Charge::Allowed { .. })),
        "{charge:?}"
    );
}

/// A governor check that must pass.
fn theirs_check(gov: &DefaultKeyedRateLimiter<u64>, key: &u64, n: NonZeroU32) {
    assert!(gov.check_key_n(key, n).unwrap().is_ok());
}

fn keyed(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("keyed_weighted_check_100k_keys");
    g.throughput(Throughput::Elements(1));
    let (store, bucket, clock) = ours(SPREAD_RATE);
    let mut i = 0;
    g.bench_function("brownout", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            ours_check(&store, &bucket, &clock, keys[i]);
        })
    });
    // The same keys in a table sized for them (max_keys: 131072, 2 MiB) instead of the
    // default million (16 MiB): the difference is cache misses.
    let sized = memory_store(131_072, 8);
    let mut i = 0;
    g.bench_function("brownout_max_keys_131072", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            ours_check(&sized, &bucket, &clock, keys[i]);
        })
    });
    let gov = theirs(Duration::from_micros(1));
    let n = NonZeroU32::new(COST).unwrap();
    let mut i = 0;
    g.bench_function("governor_dashmap", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            theirs_check(&gov, &keys[i], n);
        })
    });
    g.finish();

    let mut g = c.benchmark_group("hot_single_key");
    g.throughput(Throughput::Elements(1));
    let (store, bucket, clock) = ours(HOT_RATE);
    g.bench_function("brownout", |b| {
        b.iter(|| ours_check(&store, &bucket, &clock, 42))
    });
    let gov = theirs(Duration::from_nanos(1));
    g.bench_function("governor_dashmap", |b| {
        b.iter(|| theirs_check(&gov, &42, n))
    });
    g.finish();
}

/// Two threads, each doing `iters` checks; the time per check is wall time / iters.
fn two_threads(c: &mut Criterion) {
    let keys = Arc::new(keys());
    let mut g = c.benchmark_group("two_threads");
    g.throughput(Throughput::Elements(1));
    for (name, spread, rate, period) in [
        ("one_key", 1usize, HOT_RATE, Duration::from_nanos(1)),
        ("100k_keys", KEYS, SPREAD_RATE, Duration::from_micros(1)),
    ] {
        let (store, bucket, clock) = ours(rate);
        let ks = keys.clone();
        g.bench_function(format!("brownout_{name}"), |b| {
            b.iter_custom(|iters| {
                run_pair(iters, |t, j| {
                    let key = ks[(j as usize * 2 + t) % spread];
                    ours_check(&store, &bucket, &clock, key);
                })
            })
        });
        let gov = theirs(period);
        let ks = keys.clone();
        let n = NonZeroU32::new(COST).unwrap();
        g.bench_function(format!("governor_{name}"), |b| {
            b.iter_custom(|iters| {
                run_pair(iters, |t, j| {
                    let key = ks[(j as usize * 2 + t) % spread];
                    theirs_check(&gov, &key, n);
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
    let mut facts =
        RequestFacts::new("GET", "/v1/items/it_123").with_authorization(auth.as_bytes());
    facts.peer = peer;
    facts
}

/// Clients taking turns in the hot-state decision benches. One client could not be checked
/// back to back without running dry (a config allows at most 1M credits a second, a GET of an
/// item costs 2, and a decision takes well under 2 µs); 32 stay within their rate up to 16M
/// decisions a second, and their state stays in cache.
const HOT_CLIENTS: usize = 32;

/// Checks that a decision let the request through, then drops it (ending the request).
fn admitted(decision: Decision) {
    assert!(matches!(decision, Decision::Allowed(_)), "{decision:?}");
    black_box(decision);
}

/// The whole decision for one request: classify, request_rate (with a cost table and a
/// quota), concurrent_requests, fleet_usage and worker_utilization, metrics, guards.
fn decision(c: &mut Criterion) {
    let mut config = Config::default();
    let l = &mut config.limiters;
    l.request_rate.mode = Mode::Enforce;
    // Enforcing at the highest rate a config allows; the benches measure admissions (each
    // asserts that it was one), so the hot ones take turns between HOT_CLIENTS clients.
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
    // Each client from its own address, as in a real fleet: behind one address, the clients'
    // sum ran into the per-IP ceiling (`per_ip: auto`) on a fast machine.
    let peers: Vec<_> = (0..KEYS)
        .map(|i| {
            Some(std::net::IpAddr::from([
                10,
                (i >> 16) as u8,
                (i >> 8) as u8,
                i as u8,
            ]))
        })
        .collect();
    let mut g = c.benchmark_group("decision");
    g.throughput(Throughput::Elements(1));
    // Where the time goes: the default config (worker_utilization only), then one per-user
    // limiter at a time, all on a few hot clients.
    for (name, enable) in [
        ("only_worker_utilization", [false, false, false]),
        ("plus_request_rate", [true, false, false]),
        ("plus_concurrent_requests", [false, true, false]),
        ("plus_fleet_usage", [false, false, true]),
    ] {
        let mut partial = Config::default();
        let l = &mut partial.limiters;
        l.request_rate = config.limiters.request_rate.clone();
        l.request_rate.mode = if enable[0] { Mode::Enforce } else { Mode::Off };
        l.concurrent_requests.mode = if enable[1] { Mode::Enforce } else { Mode::Off };
        l.fleet_usage.mode = if enable[2] { Mode::Enforce } else { Mode::Off };
        l.fleet_usage.capacity = 1_000_000;
        let b = Brownout::builder(partial)
            .seed(1)
            .admin_token("bench")
            .build()
            .unwrap();
        let mut i = 0;
        g.bench_function(format!("{name}_hot_clients"), |bench| {
            bench.iter(|| {
                i = (i + 1) % HOT_CLIENTS;
                admitted(b.check(&facts(&auth[i], peers[i]), None))
            })
        });
    }
    let mut i = 0;
    g.bench_function("all_four_limiters_100k_keys", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            admitted(brownout.check(&facts(&auth[i], peers[i]), None));
        })
    });
    // A few clients: the same work with the keyed state in cache.
    let mut i = 0;
    g.bench_function("all_four_limiters_hot_clients", |b| {
        b.iter(|| {
            i = (i + 1) % HOT_CLIENTS;
            admitted(brownout.check(&facts(&auth[i], peers[i]), None))
        })
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
        l.worker_utilization.capacity = Some(1_000_000);
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

/// A memory store sized as a configuration with these `max_keys` would size it.
fn memory_store(rate_keys: usize, concurrency_keys: usize) -> MemoryStore {
    let mut limiters = brownout::config::LimitersConfig::default();
    limiters.request_rate.max_keys = rate_keys;
    limiters.concurrent_requests.max_keys = concurrency_keys;
    MemoryStore::for_limiters(&limiters)
}
