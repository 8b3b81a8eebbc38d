//! The Lua scripts' arithmetic against the in-memory limiters', on a real Redis: the same
//! vectors (Stripe's credit-pool example and its 500-token bucket) and long seeded random
//! sequences across window boundaries, compared answer by answer. The scripts are run "as of"
//! chosen times (`RedisStore::answer_at`), so the server's clock does not enter.
#![allow(clippy::disallowed_methods)] // real servers, real time

mod redis_server;

use brownout::config::{QuotaAlgorithm, StoreConfig, StoreKind};
use brownout::limiter::gcra::{self, Bucket, BucketCharge, Charge};
use brownout::limiter::window::{WindowCheck, WindowRule};
use brownout::limiter::LimiterName;
use brownout::rng::SplitMix64;
use brownout::store::redis::{ClientReply, RedisStore};
use brownout::store::{Ask, Op, Reply};
use redis_server::RedisServer;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn store(redis: &RedisServer) -> Arc<RedisStore> {
    let tables = brownout::config::LimitersConfig::default().tables();
    store_of(
        redis,
        &tables,
        Arc::new(|op| panic!("redis call failed: {op}")),
    )
    .await
}

/// A store of `tables` on `redis`, `on_error` told of each failed call.
async fn store_of(
    redis: &RedisServer,
    tables: &[brownout::store::TableSpec],
    on_error: Arc<dyn Fn(&'static str) + Send + Sync>,
) -> Arc<RedisStore> {
    let mut config = StoreConfig::default();
    config.kind = StoreKind::Redis;
    config.url = Some(redis.url());
    config.timeout = brownout::config::HumanDuration::from_millis(500);
    let store = Arc::new(
        RedisStore::new(
            &config,
            tables,
            1,
            Arc::new(brownout::clock::SystemClock::new()),
        )
        .unwrap(),
    );
    store.start(on_error);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !store.connected() {
        assert!(Instant::now() < deadline, "not connected");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store
}

const RATE: LimiterName = LimiterName::RequestRate;

/// request_rate's bucket of `key` (under its own tag), charged `cost` credits of `b`.
fn bucket_op(key: u64, b: &Bucket, cost: u32) -> Op {
    Op::Gcra {
        table: RATE.table(0),
        key,
        tag: key,
        charge: b.charging(cost),
    }
}

/// request_rate's group, enforced, of `ops`.
fn rate_ask(ops: impl IntoIterator<Item = Op>) -> Ask {
    let mut ask = Ask::default();
    ask.begin(RATE as u8, true, 0);
    ops.into_iter().for_each(|op| ask.push(op));
    ask
}

/// The replies to the buckets and to the windows of `ask`, apart.
fn split_replies(
    ask: &Ask,
    reply: &ClientReply,
) -> (Vec<Option<Charge>>, Vec<Option<WindowCheck>>) {
    let (mut charges, mut windows) = (Vec::new(), Vec::new());
    for (op, r) in ask.ops().iter().zip(&reply.replies) {
        match (op, *r) {
            (Op::Gcra { .. }, Some(Reply::Charge(c))) => charges.push(Some(c)),
            (Op::Gcra { .. }, _) => charges.push(None),
            (Op::Window { .. }, Some(Reply::Window(w))) => windows.push(Some(w)),
            (Op::Window { .. }, _) => windows.push(None),
            _ => {}
        }
    }
    (charges, windows)
}

/// The in-memory limiters' answer to `ask` at `now`, with the same all-or-nothing rule as
/// the chain (a refused request is charged nothing).
#[derive(Default)]
struct Oracle {
    tats: HashMap<u64, u64>,
    windows: HashMap<(usize, u64), u64>,
}

impl Oracle {
    fn decide(&mut self, ask: &Ask, now: u64) -> (Vec<Option<Charge>>, Vec<Option<WindowCheck>>) {
        let mut refused = false;
        let mut tats = Vec::new();
        let mut windows = Vec::new();
        let mut buckets = Vec::new();
        let mut quotas = Vec::new();
        for op in ask.ops() {
            match *op {
                Op::Gcra { key, charge: b, .. } => {
                    if refused {
                        buckets.push(None);
                        continue;
                    }
                    let tat = self.tats.get(&key).copied().unwrap_or(0);
                    let charge = gcra::charge(tat, now, b.increment, b.tolerance);
                    match charge {
                        Charge::Allowed { tat } => tats.push((key, tat)),
                        Charge::Denied { .. } => refused = true,
                    }
                    buckets.push(Some(charge));
                }
                Op::Window {
                    table,
                    key,
                    rule,
                    count,
                } => {
                    if refused {
                        quotas.push(None);
                        continue;
                    }
                    let at = (table.id(), key);
                    let v = self.windows.get(&at).copied().unwrap_or(0);
                    let (next, check) = rule.hit(v, now, count);
                    if let Some(n) = next {
                        windows.push((at, n));
                    }
                    refused |= !check.allowed;
                    quotas.push(Some(check));
                }
                Op::Slot { .. } => {}
            }
        }
        if !refused {
            self.tats.extend(tats);
            self.windows.extend(windows);
        }
        (buckets, quotas)
    }
}

/// 2023-11-14T22:13:20Z, on a whole day: windows start at round times.
const T0: u64 = 1_700_006_400_000_000;
const SEC: u64 = 1_000_000;
const MINUTE: u64 = 60 * SEC;

#[tokio::test]
async fn the_credit_pool_example_in_redis() {
    let redis = RedisServer::start();
    let store = store(&redis).await;
    // 100 credits, one a minute; three POSTs of 20 at 00:10, a GET of 2 at 00:20.
    let b = Bucket::new(1.0 / 60.0, 100.0, 0.0);
    let ask = |cost| rate_ask([bucket_op(9, &b, cost)]);
    let mut tat = 0;
    for _ in 0..3 {
        let answer = store.answer_at(&ask(20), T0 + 10 * MINUTE).await.unwrap();
        let Some(Charge::Allowed { tat: t }) = answer.reply.charge(0) else {
            panic!("refused")
        };
        tat = t;
    }
    assert!((b.balance(tat - T0, 10 * MINUTE) - 40.0).abs() < 1e-9);
    let answer = store.answer_at(&ask(2), T0 + 20 * MINUTE).await.unwrap();
    let Some(Charge::Allowed { tat }) = answer.reply.charge(0) else {
        panic!("refused")
    };
    assert_eq!(b.remaining(tat - T0, 20 * MINUTE), 48);
    assert!((b.balance(tat - T0, 20 * MINUTE) - 48.0).abs() < 1e-9);
}

#[tokio::test]
async fn a_full_bucket_of_five_admits_five_at_one_instant_in_redis() {
    let redis = RedisServer::start();
    let store = store(&redis).await;
    // 1e6 / 1.5 rounds up: separately rounded, five steps overshot the tolerance by 2 µs.
    let bucket = Bucket::new(1.5, 5.0, 0.0);
    // A per-IP ceiling of 5 at 1.5/s in front of a roomy client bucket.
    let ceiling = Bucket::new(1.5, 5.0, 0.0);
    let roomy = Bucket::new(1000.0, 1000.0, 0.0);
    let ask =
        |parts: &[(u64, &Bucket)]| rate_ask(parts.iter().map(|&(key, b)| bucket_op(key, b, 1)));
    let cases = [
        (ask(&[(31, &bucket)]), 0, &bucket),
        (ask(&[(32, &ceiling), (33, &roomy)]), 0, &ceiling),
    ];
    for (ask, refusing, b) in cases {
        for i in 0..5 {
            let answer = store.answer_at(&ask, T0).await.unwrap();
            assert!(!answer.reply.refused(), "request {i} of 5 was refused");
        }
        let answer = store.answer_at(&ask, T0).await.unwrap();
        let Some(Charge::Denied { wait, .. }) = answer.reply.charge(refusing) else {
            panic!("the sixth: {:?}", answer.reply.replies)
        };
        // One credit at 1.5/s, rounded up to the µs.
        assert_eq!(b.retry_after(wait), 666_667);
        let later = store.answer_at(&ask, T0 + 666_667).await.unwrap();
        assert!(!later.reply.refused(), "a credit later");
    }
}

#[tokio::test]
async fn the_scripts_answer_exactly_as_the_in_memory_limiters() {
    let redis = RedisServer::start();
    let store = store(&redis).await;
    let mut rng = SplitMix64::new(20261122);
    let mut oracle = Oracle::default();
    let ceiling = Bucket::new(20.0, 30.0, 0.0);
    let own = Bucket::new(5.0, 10.0, 0.25);
    // `excess: delay`: a charge may run 2 s past the burst (a turn to wait for).
    let paced = Bucket::new(5.0, 10.0, 0.0).paced(2 * SEC);
    let rules = [
        WindowRule {
            algorithm: QuotaAlgorithm::FixedWindow,
            limit: 5,
            window: 2 * SEC,
        },
        WindowRule {
            algorithm: QuotaAlgorithm::SlidingWindow,
            limit: 8,
            window: 3 * SEC,
        },
        WindowRule {
            algorithm: QuotaAlgorithm::SlidingWindow,
            limit: 3,
            window: SEC,
        },
    ];
    let mut now = T0;
    let mut compared = (0, 0);
    let mut refused = [0; 2];
    let mut turns = 0;
    for i in 0..3_000 {
        now += rng.next_u64() % (150_000);
        let client = 100 + rng.next_u64() % 3;
        let ip = 200 + rng.next_u64() % 2;
        let cost = 1 + (rng.next_u64() % 4) as u32;
        let mut ask = rate_ask([]);
        if i % 3 != 0 {
            ask.push(bucket_op(ip, &ceiling, cost));
        }
        if client == 102 {
            ask.push(bucket_op(client + 200, &paced, cost));
        } else {
            ask.push(bucket_op(client, &own, cost));
        }
        for (index, rule) in rules.iter().enumerate() {
            if rng.next_u64().is_multiple_of(2) {
                ask.push(Op::Window {
                    table: RATE.table(1 + index as u8),
                    key: if index == 2 { ip } else { client },
                    rule: *rule,
                    count: index != 1 || !rng.next_u64().is_multiple_of(4),
                });
            }
        }
        let want = oracle.decide(&ask, now);
        let reply = store.answer_at(&ask, now).await.unwrap().reply;
        let got = split_replies(&ask, &reply);
        assert_eq!(got.0, want.0, "request {i} at +{} µs: buckets", now - T0);
        assert_eq!(got.1, want.1, "request {i} at +{} µs: quotas", now - T0);
        compared.0 += got.0.iter().flatten().count();
        compared.1 += got.1.iter().flatten().count();
        refused[0] += got
            .0
            .iter()
            .flatten()
            .filter(|c| matches!(c, Charge::Denied { .. }))
            .count();
        refused[1] += got.1.iter().flatten().filter(|c| !c.allowed).count();
        // A paced charge past the burst: the request was given a turn to wait for.
        if let (102, Some(Some(Charge::Allowed { tat }))) = (client, got.0.last()) {
            turns += usize::from(tat - now > paced.tolerance());
        }
    }
    eprintln!(
        "compared {compared:?} answers, refusals (buckets, quotas) {refused:?}, turns {turns}"
    );
    assert!(turns > 50, "{turns} turns given");
    assert!(refused[0] > 100 && refused[1] > 100, "{refused:?}");
    // Both outcomes happened often enough to mean something.
    assert!(compared.0 > 3_000 && compared.1 > 1_000, "{compared:?}");
    assert!(oracle.tats.len() == 5);
}

#[tokio::test]
async fn stripes_token_bucket_of_500_at_100_a_second_in_redis() {
    let redis = RedisServer::start();
    let store = store(&redis).await;
    // Stripe's reference: REPLENISH_RATE 100, CAPACITY 5 × 100, one token a request.
    let b = Bucket::new(100.0, 500.0, 0.0);
    let ask = rate_ask([bucket_op(5, &b, 1)]);
    let burst = |at: u64| {
        let (store, ask) = (store.clone(), ask.clone());
        async move {
            let mut allowed = 0;
            loop {
                let reply = store.answer_at(&ask, at).await.unwrap().reply;
                match reply.charge(0) {
                    Some(Charge::Allowed { .. }) => allowed += 1,
                    Some(Charge::Denied { wait, .. }) => return (allowed, wait),
                    None => panic!("not evaluated"),
                }
            }
        }
    };
    // A full bucket at once: 500, then the next token in 10 ms.
    assert_eq!(burst(T0).await, (500, 10_000));
    // A second later, 100 more.
    assert_eq!(burst(T0 + SEC).await, (100, 10_000));
}

/// A client's own bucket and its permits live in one hash (`{client}:client`: field `t` the
/// bucket's TAT, a field per permit), which expires once both its bucket would be full again
/// and its newest permit is past the TTL; an expiry is never moved earlier, and a permit given
/// back is its field deleted.
#[tokio::test]
async fn a_clients_bucket_and_permits_share_one_hash_that_expires_with_what_it_holds() {
    let redis = RedisServer::start();
    let store = store(&redis).await;
    let mut c = redis.connection();
    let key = 0x00c0_ffee_u64;
    let hash = format!("brownout:{{{key:016x}}}:client");
    let pttl =
        |c: &mut redis::Connection| -> i64 { redis::cmd("PTTL").arg(&hash).query(c).unwrap() };
    let fields = |c: &mut redis::Connection| -> HashMap<String, String> {
        redis::cmd("HGETALL").arg(&hash).query(c).unwrap()
    };
    // A permit alone: the hash holds it and an empty bucket, for the permits' TTL (60 s).
    let permits = LimiterName::ConcurrentRequests;
    let slot = Op::Slot {
        table: permits.table(0),
        key,
        max: 10,
    };
    let mut permit = Ask::default();
    permit.begin(permits as u8, true, 0);
    permit.push(slot);
    let first = store.answer(&permit).await.unwrap();
    assert_eq!(first.reply.replies, vec![Some(Reply::Slot(true))]);
    let held = fields(&mut c);
    assert_eq!(held.len(), 2, "{held:?}");
    assert_eq!(held["t"], "0");
    let ttl = pttl(&mut c);
    assert!(ttl > 59_000 && ttl <= 60_001, "permits' TTL: {ttl} ms");
    // The bucket charged 100 s ahead: the hash lives as long as the bucket needs.
    let mut charge = rate_ask([Op::Gcra {
        table: RATE.table(0),
        key,
        tag: key,
        charge: BucketCharge::new(100_000_000, 200_000_000),
    }]);
    charge.begin(permits as u8, true, 0);
    charge.push(slot);
    let second = store.answer(&charge).await.unwrap();
    assert_eq!(second.reply.replies[1], Some(Reply::Slot(true)));
    assert!(second.reply.charge(0).is_some());
    let held = fields(&mut c);
    assert_eq!(held.len(), 3, "the bucket and two permits: {held:?}");
    // 'tat:step:tolerance': the bucket that wrote it (no step here) beside its TAT.
    let tat = held["t"].strip_suffix(":0:200000000").unwrap();
    assert_eq!(tat, (second.reply.now + 100_000_000).to_string());
    let ttl = pttl(&mut c);
    assert!(ttl > 99_000 && ttl <= 100_001, "the bucket's TTL: {ttl} ms");
    // Another permit alone does not cut the hash's life short.
    store.answer(&permit).await.unwrap();
    let ttl = pttl(&mut c);
    assert!(ttl > 98_000, "never moved earlier: {ttl} ms");
    // Given back: each permit's field is deleted; the bucket stays.
    for answer in [&first, &second] {
        store.undo(brownout::store::redis::Undo::Release {
            set: brownout::store::redis::SlotSet {
                table: permits.table(0),
                key,
            },
            member: answer.member,
        });
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while fields(&mut c).len() != 2 {
        assert!(Instant::now() < deadline, "permits not given back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(fields(&mut c).contains_key("t"));
    // A refund of the bucket's charge goes back into field t.
    store.undo(brownout::store::redis::Undo::Gcra {
        table: RATE.table(0),
        tag: key,
        key,
        increment: 100_000_000,
    });
    while fields(&mut c)["t"] != format!("{}:0:200000000", second.reply.now) {
        assert!(Instant::now() < deadline, "refund not made");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A sliding log answers in Redis exactly as in memory (whose log is checked against a
/// brute-force model in `src/math/log_tests.rs`): every decision, remaining, reset and retry,
/// over a seeded schedule of bursts at one instant, gaps across the window's edge and checks
/// that do not record, on a few keys; then Redis is killed and restarted from its append-only
/// file, and the logs it kept decide alike from there.
#[tokio::test]
async fn a_sliding_log_answers_in_redis_as_in_memory_across_a_restart() {
    let dir = redis_server::TempDir::new("sliding-log");
    let mut redis = RedisServer::persistent(dir.path());
    let mut limiters = brownout::config::LimitersConfig::default();
    limiters
        .request_rate
        .quotas
        .push(brownout::config::QuotaConfig::new(
            "log",
            QuotaAlgorithm::SlidingLog,
            4,
            brownout::config::HumanDuration::from_secs(20),
        ));
    let store = store_of(&redis, &limiters.tables(), Arc::new(|_| {})).await;
    let memory = brownout::store::MemoryStore::for_limiters(&limiters);
    let rule = WindowRule {
        algorithm: QuotaAlgorithm::SlidingLog,
        limit: 4,
        window: 30 * SEC,
    };
    let table = RATE.table(1);
    let mut rng = SplitMix64::new(20261128);
    let mut now = T0;
    let mut refused = 0;
    for i in 0..2_000 {
        if i == 1_000 {
            redis.kill();
            redis = RedisServer::persistent_on(redis.port, dir.path());
        }
        now += match rng.next_u64() % 8 {
            0..=3 => 0,
            4 => 30 * SEC - rng.next_u64() % 3,
            _ => rng.next_u64() % (4 * SEC),
        };
        let key = 1 + rng.next_u64() % 2;
        let count = !rng.next_u64().is_multiple_of(5);
        let op = Op::Window {
            table,
            key,
            rule,
            count,
        };
        let want = brownout::store::Store::window(&memory, table, key, now, &rule, count).unwrap();
        let ask = rate_ask([op]);
        let deadline = Instant::now() + Duration::from_secs(20);
        let reply = loop {
            match store.answer_at(&ask, now).await {
                Ok(answer) => break answer.reply,
                Err(e) => assert!(Instant::now() < deadline, "request {i}: {e:?}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let got = split_replies(&ask, &reply).1;
        assert_eq!(got, [Some(want)], "request {i} at +{} µs", now - T0);
        refused += usize::from(!want.allowed);
    }
    assert!((300..1_500).contains(&refused), "{refused} refused");
}
