//! End to end, in compressed time: the demo app (real servers on loopback) under about twice
//! its capacity with all four tiers. With worker_utilization, test traffic must be shed first,
//! then GETs, then POSTs, critical never, and shedding must return to zero once the load
//! stops; with adaptive_concurrency, the same order, and critical requests no longer wait
//! behind a queue of everyone else; with the demo's comparison arm (another crate's
//! adaptive limiter), overload is refused without regard to tier.
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

use brownout::config::HumanDuration;
use brownout::Tier;
use brownout_cli::config::CliConfig;
use brownout_cli::demo::Demo;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

fn compressed_config() -> CliConfig {
    let mut c = CliConfig::demo();
    c.brownout.admin.bind = "127.0.0.1:0".into();
    c.demo.bind = "127.0.0.1:0".into();
    // 4 workers × 20 ms: capacity 200 requests/s.
    c.demo.workers = 4;
    c.demo.service_time = HumanDuration::from_millis(20);
    let wu = &mut c.brownout.limiters.worker_utilization;
    wu.capacity = Some(4);
    wu.sample_interval = HumanDuration::from_millis(100);
    wu.seconds_before_shedding = 0.5;
    wu.seconds_to_shed_all = 2.0;
    c
}

const TIERS: [(Tier, &str, &str, Option<&str>); 4] = [
    (Tier::Test, "GET", "/v1/items", Some("Bearer sk_test_load")),
    (Tier::Get, "GET", "/v1/items", None),
    (Tier::Post, "POST", "/v1/items", None),
    (Tier::Critical, "POST", "/v1/charges", None),
];

#[derive(Default, Debug)]
struct TierStats {
    sent: u32,
    ok: u32,
    shed: u32,
    first_shed: Option<Duration>,
    /// The longest a successful request took.
    slowest: Duration,
}

/// Open loop: 400 requests/s (twice the capacity) for 4 s, at most 1,600 requests, with at
/// most 256 outstanding, the four tiers in turn; what each tier got.
async fn offer_twice_the_capacity(demo: &Demo) -> HashMap<Tier, TierStats> {
    let base = format!("http://{}", demo.app_addr);
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(5))
        .finish();
    let stats: Rc<std::cell::RefCell<HashMap<Tier, TierStats>>> = Rc::default();
    let started = Instant::now();
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(256));
    let mut tick = tokio::time::interval(Duration::from_micros(2500));
    let mut tasks = Vec::new();
    for i in 0..1600usize {
        tick.tick().await;
        if started.elapsed() > Duration::from_secs(6) {
            break; // a slow machine must not stretch the test without bound
        }
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            continue;
        };
        let (tier, method, path, auth) = TIERS[i % 4];
        let mut req = client.request(method.parse().unwrap(), format!("{base}{path}"));
        if let Some(auth) = auth {
            req = req.insert_header(("Authorization", auth));
        }
        let stats = stats.clone();
        tasks.push(actix_web::rt::spawn(async move {
            let sent = started.elapsed();
            let status = req.send().await.map(|r| r.status().as_u16());
            let at = started.elapsed();
            drop(permit);
            let mut all = stats.borrow_mut();
            let s = all.entry(tier).or_default();
            s.sent += 1;
            match status {
                Ok(503) => {
                    s.shed += 1;
                    s.first_shed.get_or_insert(at);
                }
                Ok(code) if code < 300 => {
                    s.ok += 1;
                    s.slowest = s.slowest.max(at - sent);
                }
                other => panic!("unexpected answer for {tier}: {other:?}"),
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    stats.take()
}

#[actix_web::test]
async fn overload_sheds_by_tier_and_recovers() {
    // The controller alone (the fast guard's own test is below), on its pinned capacity.
    let mut c = compressed_config();
    c.brownout.limiters.adaptive_concurrency.mode = brownout::Mode::Off;
    sheds_by_tier_and_recovers(c).await;
}

#[actix_web::test]
async fn on_axum_overload_sheds_by_tier_and_recovers_too() {
    // The same demo served by axum behind the tower layer (`demo.framework: axum`).
    let mut c = compressed_config();
    c.brownout.limiters.adaptive_concurrency.mode = brownout::Mode::Off;
    c.demo.framework = brownout_cli::config::DemoFramework::Axum;
    let demo = Demo::start(c.clone()).expect("demo starts");
    // The same answers as on actix.
    let client = awc::Client::default();
    let mut res = client
        .get(format!("http://{}/v1/items/item_9", demo.app_addr))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["id"], "item_9");
    demo.stop().await;
    sheds_by_tier_and_recovers(c).await;
}

/// The demo of `c` under twice its capacity: test traffic shed first, then GETs, then POSTs,
/// critical never, and every tier served again once the load stops.
async fn sheds_by_tier_and_recovers(c: CliConfig) {
    let demo = Demo::start(c).expect("demo starts");
    let base = format!("http://{}", demo.app_addr);
    let client = awc::Client::default();
    let stats = offer_twice_the_capacity(&demo).await;
    let peak = demo.brownout.plan();
    let of = |t: Tier| {
        stats
            .get(&t)
            .map(|s| (s.shed, s.first_shed))
            .unwrap_or_default()
    };
    println!("peak plan {peak:?}\nstats {stats:#?}");

    let (critical_shed, _) = of(Tier::Critical);
    assert_eq!(critical_shed, 0, "critical traffic is never shed");
    assert!(stats[&Tier::Critical].ok > 0);
    let (test_shed, test_first) = of(Tier::Test);
    let (get_shed, get_first) = of(Tier::Get);
    let (post_shed, post_first) = of(Tier::Post);
    assert!(
        test_shed > 0 && get_shed > 0,
        "overload must shed test and get traffic"
    );
    assert!(
        test_first < get_first,
        "test shed before get: {test_first:?} vs {get_first:?}"
    );
    if post_shed > 0 {
        assert!(
            get_first < post_first,
            "get shed before post: {get_first:?} vs {post_first:?}"
        );
    }
    assert!(
        test_shed >= get_shed && get_shed >= post_shed,
        "{test_shed} >= {get_shed} >= {post_shed}"
    );

    // Load is over: the controller must bring every tier back (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let plan = demo.brownout.plan();
        if plan.probability.test == 0.0 && plan.amount <= 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still shedding after the load stopped: {plan:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let res = client
        .get(format!("{base}/v1/items"))
        .insert_header(("Authorization", "Bearer sk_test_load"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200, "test traffic is served again");
    demo.stop().await;
}

#[actix_web::test]
async fn adaptive_concurrency_holds_the_queue_short_and_refuses_by_tier() {
    let mut c = compressed_config();
    c.brownout.limiters.worker_utilization.mode = brownout::Mode::Off;
    let a = &mut c.brownout.limiters.adaptive_concurrency;
    a.mode = brownout::Mode::Enforce;
    a.window = HumanDuration::from_millis(100);
    a.floor_window = HumanDuration::from_secs(2);
    a.min_limit = 2;
    // The limit before anything is learned: a step to 2C from cold meets 20 (the default,
    // 100, is for apps of many workers; its own cold start is the matrix's to judge).
    a.initial_limit = 20;
    let demo = Demo::start(c).expect("demo starts");
    let stats = offer_twice_the_capacity(&demo).await;
    println!("stats {stats:#?}");
    let limit = demo.brownout.render_metrics();
    let limit: f64 = limit
        .lines()
        .find_map(|l| l.strip_prefix("brownout_concurrency_limit "))
        .expect("the gauge")
        .parse()
        .unwrap();
    println!("limit {limit}");
    let shed = |t: Tier| stats.get(&t).map_or(0, |s| s.shed);
    assert_eq!(shed(Tier::Critical), 0, "critical traffic is never refused");
    assert!(
        shed(Tier::Test) > 0,
        "twice the capacity is refused in part"
    );
    assert!(
        shed(Tier::Test) >= shed(Tier::Get) && shed(Tier::Get) >= shed(Tier::Post),
        "tier order: {stats:?}"
    );
    // 4 workers: the limit settles near them (a queue of 20 would be the initial limit).
    assert!((2.0..20.0).contains(&limit), "{limit}");
    // Critical requests wait behind at most a limit's worth of work: far from the 5 s that a
    // queue of twice the capacity reaches (loose: CI machines are slow and shared).
    let critical = &stats[&Tier::Critical];
    assert!(critical.slowest < Duration::from_secs(2), "{critical:?}");
    demo.stop().await;
}

/// The scorecard's comparison arm: every brownout limiter off and congestion-limiter's Vegas
/// in front of the routes. It refuses overload too, but blind to tiers: critical requests are
/// refused with the rest.
#[actix_web::test]
async fn the_alternative_limiter_refuses_overload_without_regard_to_tier() {
    let mut c = compressed_config();
    c.brownout.limiters.worker_utilization.mode = brownout::Mode::Off;
    c.demo.alternative_limiter = brownout_cli::config::AlternativeLimiter::Vegas;
    let demo = Demo::start(c).expect("demo starts");
    let client = awc::Client::default();
    // Its initial limit is 20 in flight: 40 at once get 20 refusals, named in the body.
    let base = format!("http://{}", demo.app_addr);
    let sent: Vec<_> = (0..40)
        .map(|_| actix_web::rt::spawn(client.post(format!("{base}/v1/charges")).send()))
        .collect();
    let mut refused = 0;
    for answer in sent {
        let mut res = answer.await.unwrap().expect("answered");
        if res.status() == 503 {
            let body: serde_json::Value = res.json().await.unwrap();
            assert_eq!(body["limiter"], "congestion_limiter");
            assert_eq!(res.headers().get("retry-after").unwrap(), "1");
            refused += 1;
        } else {
            assert!(res.status().is_success());
        }
    }
    assert!(
        refused >= 10,
        "a burst twice its limit is refused in part: {refused}"
    );
    let stats = offer_twice_the_capacity(&demo).await;
    println!("stats {stats:#?}");
    let shed = |t: Tier| stats.get(&t).map_or(0, |s| s.shed);
    assert!(shed(Tier::Test) + shed(Tier::Get) > 0, "{stats:?}");
    demo.stop().await;
}
