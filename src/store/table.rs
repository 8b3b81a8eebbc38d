//! A fixed-capacity, lock-free table of per-key state: 16 bytes a slot, allocated once.
//!
//! Keys are 64-bit hashes. A key lives in one of two buckets of [`WAYS`] slots, chosen by its
//! low and its middle bits (two-choice hashing keeps early evictions rare up to a full table);
//! each slot is a key word and a state word. The state word carries a 16-bit tag of its key in
//! its top bits and a 48-bit value below, so an update that raced with the slot being given to
//! another key fails its compare-and-swap instead of corrupting the other key's state.
//!
//! A slot is given up in three steps: its state word is swapped to `BUSY` (which only succeeds
//! if nobody changed it), its key is cleared (or replaced), and the new owner writes a fresh
//! state word. Readers that meet `BUSY` retry. When a bucket is full, a new key takes the slot
//! its caller ranks as the best victim (for a token bucket: the most idle key); slots the caller
//! refuses to rank (for the concurrency limiter: keys with requests in flight) are never taken.
//!
//! Two threads claiming a brand-new key in the same instant may, rarely, each take a slot; the
//! spare copy is idle and is swept away. The worst case is one extra burst for that key.
//!
//! The tag is what keeps a stale update out of a slot that was given to another key meanwhile
//! (the model check in this file explores those races). Two keys with the same tag (1 in
//! 65,536 pairs) are not told apart: if one is evicted while an update of it is in flight and
//! the other takes its slot with a state word equal to the one the update read, that update
//! lands on the other key — one request's charge counted against another client. Rare and
//! bounded (one update), but known.

#[cfg(all(test, brownout_loom))]
use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(not(all(test, brownout_loom)))]
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Waits a moment before retrying a compare-and-swap (under the model checker: lets the other
/// thread run).
fn backoff() {
    #[cfg(all(test, brownout_loom))]
    loom::thread::yield_now();
    #[cfg(not(all(test, brownout_loom)))]
    std::hint::spin_loop();
}

/// Slots per bucket (two cache lines).
pub const WAYS: usize = 8;
/// Largest value a slot can hold (48 bits, less one so no word equals `BUSY`).
pub const MAX_VALUE: u64 = (1 << 48) - 2;

const VALUE_MASK: u64 = (1 << 48) - 1;
const BUSY: u64 = u64::MAX;
/// Retries of one update before giving up (the caller fails open).
const ATTEMPTS: usize = 64;

/// One bucket: its keys in one cache line, their state words in the next, so looking a key up
/// reads a single line before touching its state.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Bucket {
    keys: [AtomicU64; WAYS],
    words: [AtomicU64; WAYS],
}

/// A slot: a key word and its state word.
#[derive(Debug, Clone, Copy)]
struct Slot<'a> {
    key: &'a AtomicU64,
    word: &'a AtomicU64,
}

impl Bucket {
    fn slots(&self) -> impl Iterator<Item = Slot<'_>> + Clone {
        self.keys
            .iter()
            .zip(&self.words)
            .map(|(key, word)| Slot { key, word })
    }
}

/// What an update does with a slot's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update<R> {
    /// Store this value and return `R`.
    Write(u64, R),
    /// Leave the value as it is and return `R`.
    Keep(R),
    /// Give the slot up (the key's state is empty again) and return `R`.
    Remove(R),
}

/// The table. See the module docs for the protocol.
#[derive(Debug)]
pub struct KeyTable {
    buckets: Box<[Bucket]>,
    bucket_mask: usize,
    live: AtomicUsize,
}

/// Keys are stored as non-zero words: zero marks an empty slot.
fn stored(key: u64) -> u64 {
    if key == 0 {
        1
    } else {
        key
    }
}

/// The key's tag: its top 16 bits, never zero.
fn tag(key: u64) -> u64 {
    match key >> 48 {
        0 => 1,
        t => t,
    }
}

fn pack(key: u64, value: u64) -> u64 {
    (tag(key) << 48) | value.min(MAX_VALUE)
}

impl KeyTable {
    /// A table with room for at least `max_keys` keys (rounded up to a power of two).
    pub fn new(max_keys: usize) -> Self {
        let slots = max_keys.max(2 * WAYS).next_power_of_two();
        Self {
            buckets: (0..slots / WAYS).map(|_| Bucket::default()).collect(),
            bucket_mask: slots / WAYS - 1,
            live: AtomicUsize::new(0),
        }
    }

    /// How many keys fit.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Keys currently tracked.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Bytes the table occupies.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets) + std::mem::size_of::<Self>()
    }

    /// The slots of the key's two buckets (first choice first).
    fn candidates(&self, key: u64) -> impl Iterator<Item = Slot<'_>> + Clone {
        let first = key as usize & self.bucket_mask;
        let mut second = (key >> 32) as usize & self.bucket_mask;
        if second == first {
            second = (first + 1) & self.bucket_mask;
        }
        self.buckets[first]
            .slots()
            .chain(self.buckets[second].slots())
    }

    /// The value of `key`, if it is tracked.
    pub fn peek(&self, key: u64) -> Option<u64> {
        let key = stored(key);
        self.candidates(key).find_map(|slot| {
            let word = slot.word.load(Ordering::Acquire);
            (slot.key.load(Ordering::Acquire) == key && word != BUSY && word >> 48 == tag(key))
                .then_some(word & VALUE_MASK)
        })
    }

    /// Reads and maybe rewrites the value of `key` (0 for a key not tracked yet).
    ///
    /// `victim` ranks the values of other keys for eviction when the bucket is full (lowest
    /// goes first; `None` never goes). Returns `None` if no slot could be had or contention
    /// did not settle: the caller fails open.
    pub fn update<R>(
        &self,
        key: u64,
        victim: impl Fn(u64) -> Option<u64>,
        mut f: impl FnMut(u64) -> Update<R>,
    ) -> Option<R> {
        let key = stored(key);
        for _ in 0..ATTEMPTS {
            let Some(slot) = self.locate(key, &victim) else {
                backoff();
                continue;
            };
            let word = slot.word.load(Ordering::Acquire);
            if word == BUSY || word >> 48 != tag(key) {
                backoff();
                continue;
            }
            match f(word & VALUE_MASK) {
                Update::Keep(r) => return Some(r),
                Update::Remove(r) => {
                    if self.release(slot, word) {
                        return Some(r);
                    }
                }
                Update::Write(value, r) => {
                    let next = pack(key, value);
                    if slot
                        .word
                        .compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return Some(r);
                    }
                }
            }
        }
        None
    }

    /// The slot of `key`: found, claimed empty (in the emptier of its two buckets), or taken
    /// from the best victim.
    fn locate(&self, key: u64, victim: &impl Fn(u64) -> Option<u64>) -> Option<Slot<'_>> {
        let slots = self.candidates(key);
        let mut empty = [0usize; 2];
        for (i, slot) in slots.clone().enumerate() {
            match slot.key.load(Ordering::Acquire) {
                owner if owner == key => return Some(slot),
                0 => empty[i / WAYS] += 1,
                _ => {}
            }
        }
        let emptier = usize::from(empty[1] > empty[0]);
        let order = slots
            .clone()
            .skip(emptier * WAYS)
            .chain(slots.clone().take(emptier * WAYS));
        for slot in order {
            let owner = slot.key.load(Ordering::Acquire);
            if owner == key {
                // Another thread claimed it for this key a moment ago.
                return Some(slot);
            }
            if owner != 0 {
                continue;
            }
            match slot
                .key
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    slot.word.store(pack(key, 0), Ordering::Release);
                    self.live.fetch_add(1, Ordering::Relaxed);
                    return Some(slot);
                }
                Err(owner) if owner == key => return Some(slot),
                Err(_) => {}
            }
        }
        let (slot, word) = slots
            .filter_map(|s| {
                let word = s.word.load(Ordering::Acquire);
                let owner = s.key.load(Ordering::Acquire);
                if word == BUSY || owner == 0 || word >> 48 != tag(owner) {
                    return None;
                }
                victim(word & VALUE_MASK).map(|rank| (rank, s, word))
            })
            .min_by_key(|&(rank, _, _)| rank)
            .map(|(_, s, w)| (s, w))?;
        slot.word
            .compare_exchange(word, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        slot.key.store(key, Ordering::Release);
        slot.word.store(pack(key, 0), Ordering::Release);
        Some(slot)
    }

    /// Gives `slot` up if its state word is still `word`: the word goes `BUSY` (so racing
    /// updates retry), the key is cleared, and the next owner writes its own word.
    fn release(&self, slot: Slot<'_>, word: u64) -> bool {
        let taken = slot
            .word
            .compare_exchange(word, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if taken {
            slot.key.store(0, Ordering::Release);
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
        taken
    }

    /// Drops every key whose value `idle` says carries no information; returns how many.
    pub fn sweep(&self, idle: impl Fn(u64) -> bool) -> usize {
        let mut evicted = 0;
        for slot in self.buckets.iter().flat_map(Bucket::slots) {
            let owner = slot.key.load(Ordering::Acquire);
            if owner == 0 {
                continue;
            }
            let word = slot.word.load(Ordering::Acquire);
            if word == BUSY || word >> 48 != tag(owner) || !idle(word & VALUE_MASK) {
                continue;
            }
            if self.release(slot, word) {
                evicted += 1;
            }
        }
        evicted
    }
}

/// A model check of the slot protocol (loom).
#[cfg(all(test, brownout_loom))]
mod model;

#[cfg(all(test, not(brownout_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn add(table: &KeyTable, key: u64, n: u64) -> Option<u64> {
        table.update(key, Some, |v| Update::Write(v + n, v + n))
    }

    #[test]
    fn keys_start_at_zero_and_keep_their_values() {
        let t = KeyTable::new(64);
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
        let t = KeyTable::new(64);
        add(&t, 1, 0);
        add(&t, 2, 5);
        assert_eq!(t.sweep(|v| v == 0), 1);
        assert_eq!(t.live(), 1);
        assert_eq!(t.peek(1), None);
        assert_eq!(t.peek(2), Some(5));
        // A swept slot is reused.
        assert_eq!(add(&t, 1, 1), Some(1));
        assert_eq!(t.live(), 2);
    }

    #[test]
    fn a_full_table_evicts_the_best_victim_and_never_an_unrankable_one() {
        let t = KeyTable::new(2 * WAYS); // two buckets: every key may use both
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
        // Nothing rankable: no slot, the caller fails open.
        let none = t.update(1234 << 20, |_| None, |v| Update::Write(v + 1, ()));
        assert_eq!(none, None);
    }

    #[test]
    fn a_removed_key_gives_its_slot_up_at_once() {
        let t = KeyTable::new(64);
        add(&t, 3, 1);
        assert_eq!(t.live(), 1);
        assert_eq!(t.update(3, Some, |_| Update::Remove(())), Some(()));
        assert_eq!((t.live(), t.peek(3)), (0, None));
        // The slot is reused, and the key starts from zero again.
        assert_eq!(add(&t, 3, 2), Some(2));
        assert_eq!(t.live(), 1);
    }

    #[test]
    fn memory_is_sixteen_bytes_a_slot() {
        let t = KeyTable::new(1 << 16);
        assert_eq!(t.capacity(), 1 << 16);
        assert!(t.bytes() <= 16 * (1 << 16) + 64);
    }

    #[test]
    fn concurrent_updates_lose_nothing() {
        let t = Arc::new(KeyTable::new(1024));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        add(&t, 1 + i % 16, 1).expect("a slot");
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
}
