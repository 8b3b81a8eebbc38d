//! The allowed path allocates nothing: a counting allocator compares the same requests through
//! a bare app and through the app wrapped in brownout (the difference is the middleware's).
//! One test in this binary, so no other test allocates concurrently.

mod common;
mod counting_alloc;

use actix_web::{test, web, App, HttpResponse};

#[global_allocator]
static GLOBAL: counting_alloc::Counting = counting_alloc::Counting;

const N: u64 = 2_000;

/// Every limiter enforcing with room to spare, RateLimit fields off.
fn all_limiters() -> brownout::Config {
    let mut c = common::config();
    let l = &mut c.limiters;
    l.request_rate.mode = brownout::Mode::Enforce;
    l.request_rate.rate = 1e6;
    l.request_rate.burst = 1_000_000;
    l.request_rate.headers = false;
    l.request_rate.costs.insert("GET /v1/items".into(), 2);
    l.concurrent_requests.mode = brownout::Mode::Enforce;
    l.fleet_usage.mode = brownout::Mode::Enforce;
    l.fleet_usage.capacity = 1000;
    c
}

/// [`all_limiters`] with the RateLimit fields on: each response carries them, written once
/// per distinct reading and then shared, and the work left for the response sits in a box
/// the worker reuses.
fn all_limiters_with_fields() -> brownout::Config {
    let mut c = all_limiters();
    c.limiters.request_rate.headers = true;
    c
}

/// request_rate alone, fields off: a request holds nothing and passes straight through.
fn rate_alone() -> brownout::Config {
    let mut c = all_limiters();
    let l = &mut c.limiters;
    l.concurrent_requests.mode = brownout::Mode::Off;
    l.fleet_usage.mode = brownout::Mode::Off;
    l.worker_utilization.mode = brownout::Mode::Off;
    l.adaptive_concurrency.mode = brownout::Mode::Off;
    c
}

#[actix_web::test]
async fn the_middleware_allocates_nothing_on_the_allowed_path() {
    for config in [
        common::config(),
        all_limiters(),
        all_limiters_with_fields(),
        rate_alone(),
    ] {
        measure(config, false).await;
    }
    // An app that does not answer at once: the deadline's timer is armed, in a box the
    // worker reuses.
    measure(common::config(), true).await;
}

async fn measure(config: brownout::Config, pending: bool) {
    let rig = common::Rig::new(config);
    let handler = move || async move {
        if pending {
            tokio::task::yield_now().await;
        }
        HttpResponse::Ok().body("ok")
    };
    let bare = test::init_service(App::new().route("/v1/items", web::get().to(handler))).await;
    let wrapped = test::init_service(
        App::new()
            .wrap(rig.brownout.middleware())
            .route("/v1/items", web::get().to(handler)),
    )
    .await;

    let mut counts = Vec::new();
    for round in 0..2 {
        for app_is_wrapped in [false, true] {
            let requests: Vec<_> = (0..N)
                .map(|i| {
                    test::TestRequest::get()
                        .uri("/v1/items")
                        .insert_header(("Authorization", format!("Bearer sk_live_{round}_{i}")))
                        .to_request()
                })
                .collect();
            let before = counting_alloc::allocations();
            for req in requests {
                let res = if app_is_wrapped {
                    test::call_service(&wrapped, req).await.status()
                } else {
                    test::call_service(&bare, req).await.status()
                };
                assert!(res.is_success());
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
        "the middleware allocated {} times over {N} allowed requests",
        wrapped_allocs - bare_allocs
    );
}
