use super::*;
use crate::math::gcra::BucketCharge;
use crate::math::window::{WindowCheck, WindowRule};
use crate::schema::QuotaAlgorithm;
use crate::store::{Op, Table, TableKind, TableSpec};

const CLIENT: u64 = 7;
const IP: u64 = 9;
const BUCKETS: Table = Table::new(0);
const PERMITS: Table = Table::new(3);
const FLEET: Table = Table::new(4);

fn keys() -> Keys {
    let mut bucket = TableSpec::new(BUCKETS, TableKind::Gcra, 64);
    bucket.client = true;
    let mut permits = TableSpec::new(PERMITS, TableKind::Slots, 64);
    permits.client = true;
    let mut fleet = TableSpec::new(FLEET, TableKind::Pool, 1);
    fleet.name = "{fleet}:in_flight".into();
    Keys::new(
        "b:",
        &[
            bucket,
            TableSpec::new(Table::new(1), TableKind::Window, 64),
            TableSpec::new(Table::new(2), TableKind::Window, 64),
            permits,
            fleet,
        ],
    )
}

/// Everything enforced: request_rate (an IP ceiling, the client's bucket, a client quota
/// and an IP quota), a permit, a fleet slot; the client is `client`.
fn ask(client: u64) -> Ask {
    let rule = WindowRule {
        algorithm: QuotaAlgorithm::FixedWindow,
        limit: 3,
        window: 1_000_000,
    };
    let mut ask = Ask::default();
    ask.begin(0, true, 0);
    ask.push(Op::Gcra {
        table: BUCKETS,
        key: 1234,
        tag: IP,
        charge: BucketCharge::new(10, 100),
    });
    ask.push(Op::Gcra {
        table: BUCKETS,
        key: client,
        tag: client,
        charge: BucketCharge::new(20, 100),
    });
    for (table, key) in [(1, client), (2, IP)] {
        ask.push(Op::Window {
            table: Table::new(table),
            key,
            rule,
            count: true,
        });
    }
    ask.begin(1, true, 0);
    ask.push(Op::Slot {
        table: PERMITS,
        key: client,
        max: 5,
    });
    ask.begin(2, true, 0);
    ask.push(Op::Slot {
        table: FLEET,
        key: 0,
        max: 10,
    });
    ask
}

fn passed(part: &SlotAsk, now: u64) -> ClientReply {
    let quota = WindowCheck {
        allowed: true,
        remaining: 1,
        reset: 5,
        retry: 0,
    };
    ClientReply {
        now,
        written: true,
        groups: vec![Some(true); part.ask.groups().len()],
        replies: (part.ask.ops().iter())
            .map(|op| {
                Some(match *op {
                    Op::Gcra { charge, .. } => Reply::Charge(Charge::Allowed {
                        tat: now + charge.increment,
                    }),
                    Op::Window { .. } => Reply::Window(quota),
                    Op::Slot { .. } => Reply::Slot(true),
                })
            })
            .collect(),
    }
}

#[test]
fn one_part_per_hash_tag_and_every_group_in_each() {
    let keys = keys();
    assert_eq!(hash_tag("b:{ab}:client"), "ab");
    assert_eq!(hash_tag("b:{}x"), "b:{}x");
    let parts = split(&keys, &ask(CLIENT));
    assert_eq!(parts.len(), 3);
    // The IP's ceiling and quota; the client's bucket, quota and permit; the fleet's set.
    assert_eq!(parts[0].ops, vec![0, 3]);
    assert_eq!(parts[1].ops, vec![1, 2, 4]);
    assert_eq!(parts[2].ops, vec![5]);
    for part in &parts {
        assert_eq!(part.ask.groups().len(), 3);
        assert!(part.ask.groups().iter().all(|g| g.enforced));
    }
    assert_eq!(parts[2].ask.ops_of(&parts[2].ask.groups()[2]).len(), 1);
    // A client keyed by its IP has one part for both.
    assert_eq!(split(&keys, &ask(IP)).len(), 2);
}

#[test]
fn merged_answers_sit_where_one_script_put_them_on_one_clock() {
    let keys = keys();
    let ask = ask(CLIENT);
    let parts = split(&keys, &ask);
    // The IP's node reads a clock 30 µs behind the client's.
    let replies = vec![
        passed(&parts[0], 970),
        passed(&parts[1], 1_000),
        passed(&parts[2], 1_000),
    ];
    let (merged, give_back) = merge(&ask, &parts, &replies);
    assert_eq!(merged.now, 970);
    assert_eq!(merged.charge(0), Some(Charge::Allowed { tat: 980 }));
    assert_eq!(merged.charge(1), Some(Charge::Allowed { tat: 990 }));
    assert!(merged.replies.iter().all(Option::is_some));
    assert!(merged.written && merged.groups == vec![Some(true); 3]);
    assert_eq!(give_back, vec![vec![false; 3]; 3]);
}

#[test]
fn a_refusal_in_one_part_gives_back_what_the_others_took() {
    let keys = keys();
    let ask = ask(CLIENT);
    let parts = split(&keys, &ask);
    let mut replies: Vec<ClientReply> = parts.iter().map(|p| passed(p, 1_000)).collect();
    // The fleet is full, enforced: nothing may be kept anywhere.
    replies[2].groups[2] = Some(false);
    replies[2].replies[0] = Some(Reply::Slot(false));
    replies[2].written = false;
    let (merged, give_back) = merge(&ask, &parts, &replies);
    assert!(!merged.written);
    assert_eq!(merged.groups[2], Some(false));
    assert_eq!(merged.replies[5], Some(Reply::Slot(false)));
    assert_eq!(give_back, vec![vec![true; 3]; 3]);
    // A dark refusal of the IP's quota: only request_rate's charges go back.
    let mut dark = Ask::default();
    for g in ask.groups() {
        dark.begin(g.owner, g.owner != 0, g.memo);
        for op in ask.ops_of(g) {
            dark.push(*op);
        }
    }
    let mut replies: Vec<ClientReply> = parts.iter().map(|p| passed(p, 1_000)).collect();
    replies[0].groups[0] = Some(false);
    let (merged, give_back) = merge(&dark, &parts, &replies);
    assert!(merged.written);
    assert_eq!(merged.groups, vec![Some(false), Some(true), Some(true)]);
    assert_eq!(give_back, vec![vec![true, false, false]; 3]);
}
