//! Unit tests of the key table and its growth.

use super::*;
use std::sync::Arc;

impl<const S: usize> KeyTable<S> {
    /// Rows in use now.
    pub fn active_capacity(&self) -> usize {
        (self.masks().0 + 1) * WAYS
    }

    /// How many keys fit.
    pub fn capacity(&self) -> usize {
        self.rows.len() * WAYS
    }

    /// Bytes the table occupies.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.rows) + std::mem::size_of::<Self>()
    }
}

fn add<const S: usize>(table: &KeyTable<S>, key: u64, n: u64) -> Option<u64> {
    table.update(key, Some, |v| Update::Write(v + n, v + n))
}

#[test]
fn keys_start_at_zero_and_keep_their_values() {
    let t = KeyTable::<1>::new(64);
    assert_eq!(t.peek(5), None);
    assert_eq!(add(&t, 5, 3), Some(3));
    assert_eq!(add(&t, 5, 4), Some(7));
    assert_eq!(add(&t, 6, 1), Some(1));
    assert_eq!(t.peek(5), Some(7));
    assert_eq!(t.live(), 2);
    // Key 0 is stored like any other.
    assert_eq!(add(&t, 0, 2), Some(2));
    assert_eq!(t.peek(0), Some(2));
}

#[test]
fn sweep_drops_idle_keys_only() {
    let t = KeyTable::<1>::new(64);
    add(&t, 1, 0);
    add(&t, 2, 5);
    assert_eq!(t.sweep(|v| v == 0), 1);
    assert_eq!(t.live(), 1);
    assert_eq!(t.peek(1), None);
    assert_eq!(t.peek(2), Some(5));
    // A swept entry is reused.
    assert_eq!(add(&t, 1, 1), Some(1));
    assert_eq!(t.live(), 2);
}

#[test]
fn a_full_table_evicts_the_best_victim_and_never_an_unrankable_one() {
    let t = KeyTable::<1>::new(2 * WAYS); // two rows: every key may use both
    for k in 1..=2 * WAYS as u64 {
        add(&t, k << 20, k * 10);
    }
    assert_eq!(
        t.live(),
        2 * WAYS,
        "two-choice fills the table before evicting"
    );
    // Lowest value ranks first: key 1 goes.
    assert_eq!(add(&t, 99 << 20, 1), Some(1));
    assert_eq!(t.peek(1 << 20), None);
    assert_eq!(t.peek(2 << 20), Some(20));
    assert_eq!(t.live(), 2 * WAYS);
    // Nothing rankable: no entry, the caller fails open.
    let none = t.update(1234 << 20, |_| None, |v| Update::Write(v + 1, ()));
    assert_eq!(none, None);
}

#[test]
fn a_removed_key_gives_its_entry_up_at_once() {
    let t = KeyTable::<1>::new(64);
    add(&t, 3, 1);
    assert_eq!(t.live(), 1);
    assert_eq!(t.update(3, Some, |_| Update::Remove(())), Some(()));
    assert_eq!((t.live(), t.peek(3)), (0, None));
    // The entry is reused, and the key starts from zero again.
    assert_eq!(add(&t, 3, 2), Some(2));
    assert_eq!(t.live(), 1);
}

/// Sum of the values of every entry (a key in two entries counts twice).
fn total<const S: usize>(t: &KeyTable<S>) -> u64 {
    t.rows
        .iter()
        .flat_map(Row::entries)
        .filter(|s| s.key.load(Ordering::Acquire) != 0)
        .filter_map(|s| {
            let w = s.word.load(Ordering::Acquire);
            (w != BUSY).then(|| s.value(w))
        })
        .sum()
}

#[test]
fn the_active_prefix_grows_with_the_keys_and_keeps_every_value() {
    let t = KeyTable::<1>::new(1 << 20);
    assert_eq!(t.active_capacity(), INITIAL_ROWS * WAYS);
    let keys: Vec<u64> = (1..=50_000u64).map(crate::rng::mix).collect();
    for (i, &k) in keys.iter().enumerate() {
        assert_eq!(add(&t, k, i as u64 + 1), Some(i as u64 + 1));
    }
    assert_eq!(t.live(), keys.len());
    // Doubled at half load: more than twice the keys, far below the cap.
    let active = t.active_capacity();
    assert!(
        active >= 2 * keys.len() && active <= 4 * keys.len(),
        "{active}"
    );
    assert_eq!(t.capacity(), 1 << 20);
    for (i, &k) in keys.iter().enumerate() {
        assert_eq!(t.peek(k), Some(i as u64 + 1), "key {i}");
    }
    // Updates go on finding them (and finish any move under way).
    for &k in &keys {
        assert_eq!(add(&t, k, 1).map(|_| ()), Some(()));
    }
    assert_eq!(t.masks().0, t.masks().1, "the last move is done");
    assert_eq!(total(&t), (1..=50_000).sum::<u64>() + 50_000);
}

#[test]
fn concurrent_updates_across_growths_lose_nothing() {
    // Room for the 43,000 keys at any load: what is tested is the growth, not eviction.
    let t = Arc::new(KeyTable::<1>::new(1 << 18));
    let threads: Vec<_> = (0..4)
        .map(|n| {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut counted = 0;
                for i in 0..20_000u64 {
                    // Each thread brings new keys (forcing growths) and updates shared ones.
                    let key = if i % 2 == 0 {
                        1 + i % 3_000
                    } else {
                        1_000_000 * (n + 1) + i
                    };
                    // Nothing is evicted (so every count must survive); an update that finds
                    // no entry is one the limiter fails open on.
                    let added =
                        t.update(crate::rng::mix(key), |_| None, |v| Update::Write(v + 1, ()));
                    counted += u64::from(added.is_some());
                }
                counted
            })
        })
        .collect();
    let counted: u64 = threads.into_iter().map(|th| th.join().unwrap()).sum();
    assert!(t.active_capacity() > INITIAL_ROWS * WAYS);
    // A few may find an entry busy for too long when a mover lost its core (this runs beside
    // other tests on two cores): those fail open, as a limiter would. None may be lost.
    assert!(
        counted >= 79_600,
        "{} updates failed open",
        80_000 - counted
    );
    assert_eq!(total(&t), counted);
}

#[test]
fn memory_is_sixteen_bytes_an_entry() {
    let t = KeyTable::<1>::new(1 << 16);
    assert_eq!(t.capacity(), 1 << 16);
    // Plus the table's own fields: two cache lines, its claim counter padded onto its own.
    assert!(t.bytes() <= 16 * (1 << 16) + 256);
}

#[test]
fn concurrent_updates_lose_nothing() {
    let t = Arc::new(KeyTable::<1>::new(1024));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let t = t.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u64 {
                    add(&t, 1 + i % 16, 1).expect("an entry");
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let total: u64 = (1..=16).map(|k| t.peek(k).unwrap()).sum();
    assert_eq!(total, 80_000);
}

#[test]
fn memory_is_twenty_four_bytes_an_entry_in_a_wide_table() {
    let t = WideTable::new(1 << 16);
    assert_eq!(t.capacity(), 1 << 16);
    assert!(t.bytes() <= 24 * (1 << 16) + 256);
}

/// A wide value whose top 16 bits are a function of its low 48: a torn read (the low bits of
/// one write beside the top bits of another) shows.
fn checked(low: u64) -> u64 {
    let low = low & VALUE_MASK;
    ((crate::rng::mix(low) >> 48).max(1) << 48) | low
}

#[test]
fn a_wide_table_keeps_whole_values_through_growth_eviction_and_sweep() {
    let t = WideTable::new(1 << 16);
    let keys: Vec<u64> = (1..=5_000u64).map(crate::rng::mix).collect();
    for (i, &k) in keys.iter().enumerate() {
        let v = checked(i as u64 + 1);
        assert_eq!(t.update(k, Some, |_| Update::Write(v, v)), Some(v));
    }
    assert!(t.active_capacity() > INITIAL_ROWS * WAYS, "it grew");
    for &k in &keys {
        // Finishes any move under way.
        t.update(k, Some, Update::Keep);
    }
    for (i, &k) in keys.iter().enumerate() {
        assert_eq!(t.peek(k), Some(checked(i as u64 + 1)), "key {i}");
    }
    // Values above 48 bits are ranked and swept whole.
    let swept = t.sweep(|v| v & VALUE_MASK <= 1_000);
    assert_eq!(swept, 1_000);
    assert_eq!(t.peek(keys[0]), None);
    assert_eq!(t.peek(keys[1_000]), Some(checked(1_001)));
    // A wide table evicts by the whole value too: the victim with the lowest one goes.
    let small = WideTable::new(2 * WAYS);
    for k in 1..=2 * WAYS as u64 {
        let v = (k << 48) | 7;
        small.update(k << 20, Some, |_| Update::Write(v, ()));
    }
    small.update(99 << 20, Some, |_| Update::Write(5, ()));
    assert_eq!(small.peek(1 << 20), None);
    assert_eq!(small.peek(2 << 20), Some((2 << 48) | 7));
    assert_eq!(small.peek(99 << 20), Some(5));
}

#[test]
fn concurrent_wide_writes_are_never_read_torn() {
    let t = Arc::new(WideTable::new(1024));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut written = 0u64;
                for i in 0..20_000u64 {
                    let got = t.update(1 + i % 8, Some, |v| {
                        // Whole, or its low bits alone while a writer is between its stores.
                        assert!(v == checked(v) || v >> 48 == 0, "torn: {v:#x}");
                        let next = checked((v & VALUE_MASK) + 1);
                        Update::Write(next, ())
                    });
                    written += u64::from(got.is_some());
                    if let Some(v) = t.peek(1 + (i + 3) % 8) {
                        assert!(v == checked(v) || v >> 48 == 0, "torn peek: {v:#x}");
                    }
                }
                written
            })
        })
        .collect();
    let written: u64 = threads.into_iter().map(|th| th.join().unwrap()).sum();
    let counted: u64 = (1..=8).map(|k| t.peek(k).unwrap() & VALUE_MASK).sum();
    assert_eq!(counted, written);
}

#[test]
fn two_threads_hammering_one_key_never_fail_open() {
    // Each loss of a compare-and-swap is the other thread's progress: the loser backs off
    // and retries instead of giving up (it once lost 64 in a row and failed open).
    for wide in [false, true] {
        let plain = Arc::new(KeyTable::<1>::new(64));
        let wide_t = Arc::new(WideTable::new(64));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (plain, wide_t) = (plain.clone(), wide_t.clone());
                std::thread::spawn(move || {
                    (0..100_000)
                        .filter(|_| {
                            if wide {
                                add(&wide_t, 42, 1).is_none()
                            } else {
                                add(&plain, 42, 1).is_none()
                            }
                        })
                        .count()
                })
            })
            .collect();
        let failed: usize = threads.into_iter().map(|th| th.join().unwrap()).sum();
        assert_eq!(failed, 0, "wide: {wide}");
        let kept = if wide {
            wide_t.peek(42)
        } else {
            plain.peek(42)
        };
        assert_eq!(kept, Some(200_000), "wide: {wide}");
    }
}
