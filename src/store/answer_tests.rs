//! The local store's answer, group by group: the rules every store follows, what an enforced
//! refusal gives back, and what goes back when the decision does not take it over.

use super::*;
use crate::math::gcra::{Bucket, BucketCharge};
use crate::math::window::WindowRule;
use crate::store::{MemoryStore, Store, Table, TableKind, TableSpec};
use std::sync::Arc;

const CLIENT: u64 = 7;
const IP: u64 = 9;
const BUCKETS: Table = Table::new(0);
const PERMITS: Table = Table::new(1);
const FLEET: Table = Table::new(2);
/// The limiters asking, by their index: a bucket's, a permit's, a fleet slot's.
const RATE: u8 = 0;
const IN_FLIGHT: u8 = 1;
const POOL: u8 = 2;

/// A memory store with a bucket table, a permit table and a pool.
fn memory() -> MemoryStore {
    let spec = |table, kind| TableSpec::new(table, kind, 64);
    MemoryStore::with_tables(&[
        spec(BUCKETS, TableKind::Gcra),
        spec(PERMITS, TableKind::Slots),
        spec(FLEET, TableKind::Pool),
    ])
}

/// Keyed state over a memory store the test can read.
fn keyed() -> (Arc<MemoryStore>, Keyed) {
    let store = Arc::new(memory());
    (store.clone(), Keyed::local_only(store))
}

/// Permits `key` has out in `store`.
fn in_flight(store: &MemoryStore, key: u64) -> u64 {
    store.peek(PERMITS, key).unwrap().unwrap_or(0)
}

/// A bucket of `burst` credits, one a second, charged one credit.
fn bucket(key: u64, burst: f64) -> Op {
    let b = Bucket::new(1.0, burst, 0.0);
    Op::Gcra {
        table: BUCKETS,
        key,
        tag: key,
        charge: b.charging(1),
    }
}

/// Groups in order: `buckets` (if any), one permit, a fleet of `fleet` slots; each enforced
/// unless listed in `dark`.
fn ask_of(buckets: &[Op], fleet: u64, dark: &[u8]) -> Ask {
    let mut ask = Ask::default();
    if !buckets.is_empty() {
        ask.begin(RATE, !dark.contains(&RATE), 0);
        buckets.iter().for_each(|b| ask.push(*b));
    }
    ask.begin(IN_FLIGHT, !dark.contains(&IN_FLIGHT), 0);
    ask.push(Op::Slot {
        table: PERMITS,
        key: CLIENT,
        max: 1,
    });
    ask.begin(POOL, !dark.contains(&POOL), 0);
    ask.push(Op::Slot {
        table: FLEET,
        key: 0,
        max: fleet,
    });
    ask
}

/// Everything enforced: the client's bucket of two, one permit, a fleet of `fleet` slots.
fn ask(fleet: u64) -> Ask {
    ask_of(&[bucket(CLIENT, 2.0)], fleet, &[])
}

fn answer<'k>(keyed: &'k Keyed, ask: &Ask) -> Answer<'k> {
    let mut answer = Answer::new(keyed);
    answer.answer_here(ask, (0, 0), &mut None);
    answer
}

/// The TAT of `key`'s bucket (its state without the stamp beside it).
fn tat(store: &MemoryStore, key: u64) -> Option<u64> {
    store
        .peek(BUCKETS, key)
        .unwrap()
        .map(|v| crate::math::gcra::unpack(v).0)
}

#[test]
fn an_enforced_refusal_gives_back_what_was_taken_before_it() {
    let (store, keyed) = keyed();
    let ask = ask(10);
    let mut first = answer(&keyed, &ask);
    assert!(first.replies(&ask, RATE).unwrap().written());
    assert_eq!(
        first.take_slot(&ask, IN_FLIGHT),
        Ok((true, true)),
        "the decision keeps the permit"
    );
    assert_eq!(first.take_slot(&ask, POOL), Ok((true, true)));
    drop(first);
    let charged = tat(&store, CLIENT);
    // The second finds the permit taken: its credit is given back and no slot is taken.
    let mut second = answer(&keyed, &ask);
    let rate = second.replies(&ask, RATE).unwrap();
    assert!(matches!(rate.charge(0, 0), Some(Charge::Allowed { .. })));
    assert!(!rate.written(), "nothing stands");
    assert_eq!(second.take_slot(&ask, IN_FLIGHT), Ok((false, false)));
    assert!(second.take_slot(&ask, POOL).is_err(), "never reached");
    drop(second);
    assert_eq!(tat(&store, CLIENT), charged);
    assert_eq!(in_flight(&store, CLIENT), 1);
    assert_eq!(store.pool_taken(FLEET), 1);
}

#[test]
fn a_dark_refusal_keeps_nothing_for_its_limiter_and_goes_on() {
    let (store, keyed) = keyed();
    let ask = ask_of(&[bucket(CLIENT, 2.0)], 0, &[POOL]);
    let mut answer = answer(&keyed, &ask);
    assert_eq!(answer.take_slot(&ask, POOL), Ok((false, false)));
    assert!(
        answer.replies(&ask, RATE).unwrap().written(),
        "the credit stands"
    );
    assert_eq!(answer.take_slot(&ask, IN_FLIGHT), Ok((true, true)));
    drop(answer);
    assert_eq!(in_flight(&store, CLIENT), 1);
    assert!(tat(&store, CLIENT).is_some());
}

#[test]
fn what_the_decision_does_not_take_over_goes_back_when_the_answer_is_dropped() {
    let (store, keyed) = keyed();
    let answer = answer(&keyed, &ask(10));
    assert_eq!(in_flight(&store, CLIENT), 1);
    assert_eq!(store.pool_taken(FLEET), 1);
    // The chain stopped (or panicked) before concurrent_requests and fleet_usage decided.
    drop(answer);
    assert_eq!(in_flight(&store, CLIENT), 0);
    assert_eq!(store.pool_taken(FLEET), 0);
}

#[test]
fn a_refused_bucket_stops_the_answer_with_nothing_charged() {
    let (store, keyed) = keyed();
    // A per-IP ceiling with room in front of a client bucket of one, spent below.
    let own = bucket(CLIENT, 1.0);
    let ask = ask_of(&[bucket(IP, 5.0), own], 10, &[]);
    let Op::Gcra { charge, .. } = own else {
        unreachable!()
    };
    let spent = store.gcra(BUCKETS, CLIENT, 0, charge).unwrap();
    assert!(matches!(spent, Charge::Allowed { .. }));
    let mut answer = answer(&keyed, &ask);
    let rate = answer.replies(&ask, RATE).unwrap();
    assert!(matches!(rate.charge(0, 0), Some(Charge::Allowed { .. })));
    assert!(matches!(rate.charge(1, 0), Some(Charge::Denied { .. })));
    assert!(!rate.written());
    assert!(
        answer.take_slot(&ask, IN_FLIGHT).is_err(),
        "an enforced refusal stops it"
    );
    drop(answer);
    assert_eq!(
        tat(&store, IP),
        Some(0),
        "the ceiling's charge was given back"
    );
    assert_eq!(in_flight(&store, CLIENT), 0);
    assert_eq!(store.pool_taken(FLEET), 0);
}

#[test]
fn a_refusal_inside_a_group_gives_back_what_the_group_took_before_it() {
    let (store, keyed) = keyed();
    // One group: a slot, then a bucket that refuses (dark): the slot goes back at once.
    let mut ask = Ask::default();
    ask.begin(RATE, false, 0);
    ask.push(Op::Slot {
        table: PERMITS,
        key: CLIENT,
        max: 1,
    });
    ask.push(bucket(CLIENT, 0.0));
    let mut answer = answer(&keyed, &ask);
    assert_eq!(in_flight(&store, CLIENT), 0, "its slot went back");
    assert_eq!(answer.take_slot(&ask, RATE), Ok((true, false)));
    assert!(!answer.replies(&ask, RATE).unwrap().written());
}

/// A memory store whose permits fail.
struct NoPermits(MemoryStore);

impl Store for NoPermits {
    fn gcra(&self, t: Table, key: u64, now: u64, b: BucketCharge) -> Result<Charge, StoreError> {
        self.0.gcra(t, key, now, b)
    }
    fn gcra_refund(&self, t: Table, key: u64, inc: u64) -> Result<(), StoreError> {
        self.0.gcra_refund(t, key, inc)
    }
    fn slot_take(&self, t: Table, key: u64, max: u64) -> Result<bool, StoreError> {
        if t == PERMITS {
            return Err(StoreError::Timeout);
        }
        self.0.slot_take(t, key, max)
    }
    fn slot_give(&self, t: Table, key: u64) {
        self.0.slot_give(t, key)
    }
    fn peek(&self, t: Table, key: u64) -> Result<Option<u64>, StoreError> {
        self.0.peek(t, key)
    }
    fn window(&self, t: Table, key: u64, now: u64, rule: &WindowRule, count: bool) -> WindowIs {
        self.0.window(t, key, now, rule, count)
    }
    fn window_refund(&self, t: Table, key: u64, now: u64, rule: &WindowRule) -> Done {
        self.0.window_refund(t, key, now, rule)
    }
    fn evict_idle(&self, now: u64, unix_now: u64, windows: &[(Table, WindowRule)]) {
        self.0.evict_idle(now, unix_now, windows)
    }
    fn tracked_keys(&self, t: Table) -> Option<usize> {
        self.0.tracked_keys(t)
    }
}

type WindowIs = Result<crate::math::window::WindowCheck, StoreError>;
type Done = Result<(), StoreError>;

#[test]
fn an_error_answers_its_group_and_the_rest_goes_on() {
    let keyed = Keyed::local_only(Arc::new(NoPermits(memory())));
    let ask = ask(10);
    let mut running = None;
    let mut answer = Answer::new(&keyed);
    answer.answer_here(&ask, (0, 0), &mut running);
    assert_eq!(running, Some(POOL), "every group was answered");
    assert!(answer.replies(&ask, RATE).unwrap().written());
    assert_eq!(answer.take_slot(&ask, IN_FLIGHT), Err(StoreError::Timeout));
    assert_eq!(answer.take_slot(&ask, POOL), Ok((true, true)));
}
