//! Unit tests of `memory.rs`.

use super::*;
use crate::schema::QuotaAlgorithm;

impl MemoryStore {
    /// Slots taken in the pool `table` (for a moment, plus attempts about to be refused).
    pub(crate) fn pool_taken(&self, table: Table) -> u64 {
        match self.kept(table) {
            LocalTable::Pool(count) => count.0.load(Ordering::Relaxed),
            LocalTable::None
            | LocalTable::Gcra(_)
            | LocalTable::Window(_)
            | LocalTable::Log(_)
            | LocalTable::Slots { .. } => 0,
        }
    }
}

const BUCKETS: Table = Table::new(0);
const WINDOW: Table = Table::new(1);
const SLOTS: Table = Table::new(2);
const POOL: Table = Table::new(3);

fn sized(keys: usize, slot_keys: usize) -> MemoryStore {
    let spec = |id, kind, keys| TableSpec::new(Table::new(id), kind, keys);
    MemoryStore::with_tables(&[
        spec(0, TableKind::Gcra, keys),
        spec(1, TableKind::Window, keys),
        spec(2, TableKind::Slots, slot_keys),
        spec(3, TableKind::Pool, 0),
    ])
}

fn live(s: &MemoryStore, table: Table) -> usize {
    match s.kept(table) {
        LocalTable::Slots { table, .. } => table.live(),
        _ => unreachable!(),
    }
}

#[test]
fn full_buckets_are_evicted_and_counted() {
    let s = sized(64, 64);
    s.gcra(BUCKETS, 1, 0, BucketCharge::new(100, 1_000))
        .unwrap();
    s.gcra(BUCKETS, 2, 0, BucketCharge::new(900, 1_000))
        .unwrap();
    assert_eq!(s.tracked_keys(BUCKETS).unwrap(), 2);
    // At 500 µs key 1 is full again (TAT 100), key 2 is not (TAT 900).
    s.evict_idle(500, 0, &[]);
    assert_eq!(s.tracked_keys(BUCKETS).unwrap(), 1);
    s.evict_idle(900, 0, &[]);
    assert_eq!(s.tracked_keys(BUCKETS).unwrap(), 0);
}

#[test]
fn an_idle_key_keeps_its_slot_only_while_the_table_is_small() {
    let s = sized(64, 1 << 14);
    assert!(s.slot_take(SLOTS, 7, 2).unwrap());
    s.slot_give(SLOTS, 7);
    assert_eq!(s.tracked_keys(SLOTS).unwrap(), 0, "nothing in flight");
    assert_eq!(live(&s, SLOTS), 1, "the slot stays, at zero");
    assert_eq!(s.peek(SLOTS, 7).unwrap(), Some(0));
    // Fill the table past the threshold with keys that have a permit out.
    for k in 100..100 + IDLE_SLOTS_UP_TO as u64 {
        assert!(s.slot_take(SLOTS, k, 2).unwrap());
    }
    assert_eq!(s.tracked_keys(SLOTS).unwrap(), IDLE_SLOTS_UP_TO);
    let before = live(&s, SLOTS);
    s.slot_give(SLOTS, 100);
    assert_eq!(
        live(&s, SLOTS),
        before - 1,
        "now the last permit frees the slot"
    );
    assert_eq!(s.peek(SLOTS, 100).unwrap(), None);
    assert_eq!(s.tracked_keys(SLOTS).unwrap(), IDLE_SLOTS_UP_TO - 1);
}

#[test]
fn concurrency_permits_count_and_release() {
    let s = sized(64, 64);
    assert!(s.slot_take(SLOTS, 7, 2).unwrap());
    assert!(s.slot_take(SLOTS, 7, 2).unwrap());
    assert!(!s.slot_take(SLOTS, 7, 2).unwrap());
    s.slot_give(SLOTS, 7);
    assert!(s.slot_take(SLOTS, 7, 2).unwrap());
    s.slot_give(SLOTS, 7);
    assert_eq!(s.tracked_keys(SLOTS).unwrap(), 1, "one permit still out");
    s.slot_give(SLOTS, 7);
    assert_eq!(
        s.tracked_keys(SLOTS).unwrap(),
        0,
        "the last release frees the key, no sweep needed"
    );
    s.slot_give(SLOTS, 7); // a stray release takes no slot
}

#[test]
fn fleet_slots_are_bounded() {
    let s = sized(64, 64);
    assert!(s.slot_take(POOL, 0, 2).unwrap());
    assert!(s.slot_take(POOL, 0, 2).unwrap());
    assert!(!s.slot_take(POOL, 0, 2).unwrap());
    s.slot_give(POOL, 0);
    assert_eq!(s.pool_taken(POOL), 1);
    s.slot_give(POOL, 0);
    s.slot_give(POOL, 0); // never below zero
    assert_eq!(s.pool_taken(POOL), 0);
}

#[test]
fn quota_peek_takes_no_slot() {
    let rule = WindowRule {
        algorithm: QuotaAlgorithm::FixedWindow,
        limit: 2,
        window: 1_000_000,
    };
    let s = sized(64, 64);
    assert!(s.window(WINDOW, 9, 0, &rule, false).unwrap().allowed);
    assert_eq!(s.tracked_keys(WINDOW).unwrap(), 0);
    assert!(s.window(WINDOW, 9, 0, &rule, true).unwrap().allowed);
    assert!(s.window(WINDOW, 9, 0, &rule, true).unwrap().allowed);
    assert!(!s.window(WINDOW, 9, 0, &rule, true).unwrap().allowed);
    s.window_refund(WINDOW, 9, 0, &rule).unwrap();
    assert!(s.window(WINDOW, 9, 0, &rule, true).unwrap().allowed);
}
