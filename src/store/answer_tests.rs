//! The local store's answer, part by part: the script's order and rules, what an enforced
//! refusal gives back, and what goes back when the decision does not take it over.

use super::*;
use crate::math::gcra::Bucket;
use crate::store::{BucketAsk, MemoryStore, Store};
use std::sync::Arc;

const CLIENT: u64 = 7;
const IP: u64 = 9;

/// Keyed state over a memory store the test can read.
fn keyed() -> (Arc<MemoryStore>, Keyed) {
    let store = Arc::new(MemoryStore::sized(64, 1, 64));
    (store.clone(), Keyed::local_only(store))
}

/// A bucket of `burst` credits, one a second, charged one credit.
fn bucket(key: u64, burst: f64) -> BucketAsk {
    let b = Bucket::new(1.0, burst, 0.0);
    BucketAsk {
        key,
        tag: key,
        increment: b.increment(1),
        tolerance: b.tolerance(),
    }
}

/// Everything enforced: the client's bucket of two, one permit, a fleet of `fleet` slots.
fn ask(fleet: u64) -> ClientAsk {
    ClientAsk {
        buckets: [bucket(CLIENT, 2.0)].into_iter().collect(),
        in_flight: Some((CLIENT, 1)),
        fleet: Some(fleet),
        rate_enforced: true,
        in_flight_enforced: true,
        fleet_enforced: true,
        ..ClientAsk::default()
    }
}

fn answer<'k>(keyed: &'k Keyed, ask: &ClientAsk) -> Answer<'k> {
    let mut answer = Answer::new(keyed);
    answer.answer_here(ask, (0, 0), &mut None);
    answer
}

fn tat(store: &MemoryStore, key: u64) -> Option<u64> {
    store.peek(key).unwrap().tat
}

#[test]
fn an_enforced_refusal_gives_back_what_was_taken_before_it() {
    let (store, keyed) = keyed();
    let ask = ask(10);
    let mut first = answer(&keyed, &ask);
    assert!(first.rate().unwrap().written());
    assert_eq!(
        first.take_permit(),
        Ok((true, true)),
        "the decision keeps the permit"
    );
    assert_eq!(first.take_fleet_slot(), Ok((true, true)));
    drop(first);
    let charged = tat(&store, CLIENT);
    // The second finds the permit taken: its credit is given back and no slot is taken.
    let mut second = answer(&keyed, &ask);
    assert!(matches!(
        second.rate().unwrap().charge(0, 0),
        Some(Charge::Allowed { .. })
    ));
    assert!(!second.rate().unwrap().written(), "nothing stands");
    assert_eq!(second.take_permit(), Ok((false, false)));
    assert!(second.take_fleet_slot().is_err(), "never reached");
    drop(second);
    assert_eq!(tat(&store, CLIENT), charged);
    assert_eq!(store.peek(CLIENT).unwrap().in_flight, 1);
    assert_eq!(store.fleet_in_flight(), 1);
}

#[test]
fn a_dark_refusal_keeps_nothing_for_its_limiter_and_goes_on() {
    let (store, keyed) = keyed();
    let mut ask = ask(0);
    ask.fleet_enforced = false;
    let mut answer = answer(&keyed, &ask);
    assert_eq!(answer.take_fleet_slot(), Ok((false, false)));
    assert!(answer.rate().unwrap().written(), "the credit stands");
    assert_eq!(answer.take_permit(), Ok((true, true)));
    drop(answer);
    assert_eq!(store.peek(CLIENT).unwrap().in_flight, 1);
    assert!(tat(&store, CLIENT).is_some());
}

#[test]
fn what_the_decision_does_not_take_over_goes_back_when_the_answer_is_dropped() {
    let (store, keyed) = keyed();
    let answer = answer(&keyed, &ask(10));
    assert_eq!(store.peek(CLIENT).unwrap().in_flight, 1);
    assert_eq!(store.fleet_in_flight(), 1);
    // The chain stopped (or panicked) before concurrent_requests and fleet_usage decided.
    drop(answer);
    assert_eq!(store.peek(CLIENT).unwrap().in_flight, 0);
    assert_eq!(store.fleet_in_flight(), 0);
}

#[test]
fn a_refused_bucket_stops_the_answer_with_nothing_charged() {
    let (store, keyed) = keyed();
    let mut ask = ask(10);
    // A per-IP ceiling with room in front of a client bucket of one, spent below.
    ask.buckets = [bucket(IP, 5.0), bucket(CLIENT, 1.0)].into_iter().collect();
    let own = ask.buckets[1];
    let spent = store
        .rate_charge(CLIENT, 0, own.increment, own.tolerance)
        .unwrap();
    assert!(matches!(spent, Charge::Allowed { .. }));
    let mut answer = answer(&keyed, &ask);
    let rate = answer.rate().unwrap();
    assert!(matches!(rate.charge(0, 0), Some(Charge::Allowed { .. })));
    assert!(matches!(rate.charge(1, 0), Some(Charge::Denied { .. })));
    assert!(!rate.written());
    assert!(
        answer.take_permit().is_err(),
        "an enforced refusal stops it"
    );
    drop(answer);
    assert_eq!(
        tat(&store, IP),
        Some(0),
        "the ceiling's charge was given back"
    );
    assert_eq!(store.peek(CLIENT).unwrap().in_flight, 0);
    assert_eq!(store.fleet_in_flight(), 0);
}

/// A memory store whose permits fail.
struct NoPermits(MemoryStore);

impl Store for NoPermits {
    fn rate_charge(&self, key: u64, now: u64, inc: u64, tol: u64) -> Result<Charge, StoreError> {
        self.0.rate_charge(key, now, inc, tol)
    }
    fn rate_refund(&self, key: u64, inc: u64) -> Result<(), StoreError> {
        self.0.rate_refund(key, inc)
    }
    fn quota_hit(
        &self,
        quota: usize,
        key: u64,
        now: u64,
        rule: &crate::math::window::WindowRule,
        add: bool,
    ) -> Result<WindowCheck, StoreError> {
        self.0.quota_hit(quota, key, now, rule, add)
    }
    fn quota_refund(
        &self,
        quota: usize,
        key: u64,
        now: u64,
        rule: &crate::math::window::WindowRule,
    ) -> Result<(), StoreError> {
        self.0.quota_refund(quota, key, now, rule)
    }
    fn concurrency_acquire(&self, _: u64, _: u64) -> Result<bool, StoreError> {
        Err(StoreError::Timeout)
    }
    fn concurrency_release(&self, key: u64) {
        self.0.concurrency_release(key)
    }
    fn fleet_acquire(&self, limit: u64) -> Result<bool, StoreError> {
        self.0.fleet_acquire(limit)
    }
    fn fleet_release(&self) {
        self.0.fleet_release()
    }
    fn evict_idle(&self, now: u64, unix_now: u64, rules: &[crate::math::window::WindowRule]) {
        self.0.evict_idle(now, unix_now, rules)
    }
    fn tracked_keys(&self, kind: crate::store::KeyKind) -> Option<usize> {
        self.0.tracked_keys(kind)
    }
}

#[test]
fn an_error_answers_its_part_and_the_rest_goes_on() {
    let keyed = Keyed::local_only(Arc::new(NoPermits(MemoryStore::sized(64, 0, 64))));
    let mut part = None;
    let mut answer = Answer::new(&keyed);
    answer.answer_here(&ask(10), (0, 0), &mut part);
    assert_eq!(part, Some(Part::Fleet), "every part was answered");
    assert!(answer.rate().unwrap().written());
    assert_eq!(answer.take_permit(), Err(StoreError::Timeout));
    assert_eq!(answer.take_fleet_slot(), Ok((true, true)));
}
