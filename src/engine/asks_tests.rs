//! Every limiter with per-key state is asked for, and its every operation answered, by Redis as
//! by the in-memory store: a limiter added with tables of its own is covered here without a
//! line of its own (its plan must ask something, and the script must answer all of it).

#[path = "../../tests/redis_server/mod.rs"]
#[allow(clippy::disallowed_methods)]
mod redis_server;

use super::*;
use crate::config::{
    HumanDuration, LimitersConfig, PerIpConfig, QuotaAlgorithm, QuotaConfig, StoreConfig, StoreKind,
};
use crate::store::redis::RedisStore;
use crate::store::{Answer, Keyed, MemoryStore, Op, Reply};
use std::sync::Arc;
use std::time::Duration;

/// Every limiter enforced, request_rate with a per-IP ceiling and a quota of each kind.
fn limiters() -> LimitersConfig {
    let mut l = LimitersConfig::default();
    for limiter in LimiterName::ALL {
        limiter.set_mode(&mut l, Mode::Enforce);
    }
    let rr = &mut l.request_rate;
    rr.per_ip = PerIpConfig::new(10.0, 20).into();
    for (name, algorithm) in [
        ("fixed", QuotaAlgorithm::FixedWindow),
        ("sliding", QuotaAlgorithm::SlidingWindow),
        ("log", QuotaAlgorithm::SlidingLog),
    ] {
        rr.quotas.push(
            QuotaConfig::new(name, algorithm, 5, HumanDuration::from_secs(60))
                .with_routes(["POST /v1/charges"]),
        );
    }
    l
}

/// Whether `reply` answers `op` (a reply of its kind).
fn answers(op: &Op, reply: &Option<Reply>) -> bool {
    matches!(
        (op, reply),
        (Op::Gcra { .. }, Some(Reply::Charge(_)))
            | (Op::Window { .. }, Some(Reply::Window(_)))
            | (Op::Slot { .. }, Some(Reply::Slot(_)))
    )
}

#[tokio::test]
async fn every_limiters_operations_are_answered_by_redis_as_in_memory() {
    let limiters = limiters();
    let ask = super::room_tests::planned_charge(&limiters);
    // Every limiter that keeps tables asks something of them.
    for limiter in LimiterName::ALL {
        let tables: Vec<_> = limiter.tables().collect();
        if tables.is_empty() {
            assert!(ask.group(limiter as u8).is_none(), "{limiter:?}");
            continue;
        }
        let (_, group) = ask
            .group(limiter as u8)
            .unwrap_or_else(|| panic!("{limiter:?} asked for nothing"));
        let ops = ask.ops_of(group);
        assert!(!ops.is_empty(), "{limiter:?} asked for nothing");
        assert!(
            ops.iter().all(|op| tables.contains(&op.table())),
            "{limiter:?} asked another's table"
        );
    }

    // In memory.
    let tables = limiters.tables();
    let keyed = Keyed::local_only(Arc::new(MemoryStore::with_tables(&tables)));
    let mut here = Answer::new(&keyed);
    here.answer_here(&ask, (1_000_000, 1_700_006_400_000_000), &mut None);

    // In Redis, on the same ask.
    let redis = redis_server::RedisServer::start();
    let config = StoreConfig {
        kind: StoreKind::Redis,
        url: Some(redis.url()),
        ..StoreConfig::default()
    };
    let clock = Arc::new(crate::clock::SystemClock::new());
    let store = Arc::new(RedisStore::new(&config, &tables, 1, clock).unwrap());
    store.start(Arc::new(|op| panic!("redis call failed: {op}")));
    // A bounded wait for the connection (10 s), in real time: a real server.
    for _ in 0..1_000 {
        if store.connected() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(store.connected(), "not connected");
    let shared = store.answer_at(&ask, 1_700_006_400_000_000).await.unwrap();
    assert!(shared.reply.written);
    assert_eq!(shared.reply.groups, vec![Some(true); ask.groups().len()]);
    assert_eq!(shared.reply.replies.len(), ask.ops().len());
    for limiter in LimiterName::ALL
        .into_iter()
        .filter(|l| l.tables().next().is_some())
    {
        let (g, group) = ask.group(limiter as u8).unwrap();
        let range = usize::from(group.start)..usize::from(group.end);
        for (i, op) in ask.ops()[range.clone()].iter().enumerate() {
            let reply = &shared.reply.replies[range.start + i];
            assert!(
                answers(op, reply),
                "{limiter:?}'s operation {i} unanswered by Redis: {reply:?}"
            );
            assert_eq!(reply.map(|r| r.refuses()), Some(false), "{limiter:?} {i}");
        }
        let local = here.replies(&ask, limiter as u8).unwrap();
        assert!(local.written(), "{limiter:?} in memory");
        assert_eq!(shared.reply.groups[g], Some(true), "{limiter:?} in Redis");
    }
}
