//! A bounded, lock-free table of per-key state: 16 bytes a slot (24 in a wide table, below),
//! allocated once for `max_keys`, of which only an active prefix is used, grown with the keys (`grow.rs`), so a
//! hundred thousand keys sit in a few MiB of cache-friendly buckets whatever the cap.
//!
//! Keys are 64-bit hashes. A key lives in one of two buckets of [`WAYS`] slots, chosen by its
//! low and its middle bits under the active mask (two-choice hashing keeps early evictions
//! rare); each slot is a key word and a state word. The state word carries a 16-bit tag of its key in
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
//! A *wide* table (`KeyTable<2>`) keeps a 64-bit value per key whose top 16 bits are
//! advisory: the state word holds the tag and the value's low 48 bits, as above, and is the
//! state's authority; a second word, the mark, holds the whole value (for a token bucket: its
//! TAT and the stamp of the settings that wrote it). A write commits with one
//! compare-and-swap of the state word, as in any table (no lock: a writer that loses its core
//! holds nobody up), then stores the mark. A read takes the mark's top bits only when its low
//! bits agree with the state word's; else (a writer between its two stores, or a late mark)
//! the value reads with its top bits at 0. Both words of a slot share a cache line.
//!
//! The tag is what keeps a stale update out of a slot that was given to another key meanwhile
//! (the model check in this file explores those races). Two keys with the same tag (1 in
//! 65,536 pairs) are not told apart: if one is evicted while an update of it is in flight and
//! the other takes its slot with a state word equal to the one the update read, that update
//! lands on the other key — one request's charge counted against another client. Rare and
//! bounded (one update), but known.

use crate::shard::CachePadded;
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

/// Waits longer: the slot is held by a thread that may have lost its core (a move or an
/// eviction under way); give it the processor rather than spin.
fn wait_turn(attempt: usize) {
    #[cfg(not(all(test, brownout_loom)))]
    if attempt >= ATTEMPTS / 4 {
        std::thread::yield_now();
        return;
    }
    let _ = attempt;
    backoff();
}

/// Waits after losing a compare-and-swap to another update of the same key (which means that
/// update went through: no one is stuck), twice as long each time, up to 256 spins: without
/// it, the thread that just won keeps the cache line and wins again, and the other can lose
/// every round (two threads hammering one key lost 64 in a row).
fn after_lost_race(lost: u32) {
    #[cfg(all(test, brownout_loom))]
    {
        let _ = lost;
        loom::thread::yield_now();
    }
    #[cfg(not(all(test, brownout_loom)))]
    for _ in 0..1u32 << lost.min(8) {
        std::hint::spin_loop();
    }
}

/// Slots per bucket (two cache lines).
pub const WAYS: usize = 8;
/// Largest value a slot can hold (48 bits, less one so no word equals `BUSY`).
pub const MAX_VALUE: u64 = (1 << 48) - 2;

const VALUE_MASK: u64 = (1 << 48) - 1;
const BUSY: u64 = u64::MAX;
/// Retries of one update that found its slot busy or missing before giving up (the caller
/// fails open).
const ATTEMPTS: usize = 64;
/// Compare-and-swaps one update may lose to other updates of its key before giving up
/// (each loss is another request's progress; with the backoff, a few at most in practice).
const LOST_RACES: u32 = 1_024;

mod slot;
use slot::{Bucket, Slot};

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

mod grow;

/// The table, of `S` state words a slot: 1, or 2 for a wide table. See the module docs for
/// the protocol.
#[derive(Debug)]
pub struct KeyTable<const S: usize = 1> {
    buckets: Box<[Bucket<S>]>,
    /// The mask of every bucket: the table's cap.
    max_mask: usize,
    /// The active bucket mask (low half) and, while the keys placed under the previous one are
    /// being moved, that mask (high half; equal to the active one otherwise).
    masks: AtomicU64,
    /// Growth progress, each tagged with the previous mask in its high half: the next bucket
    /// of the previous prefix to hand out, and how many of them are done.
    cursor: AtomicU64,
    moved: AtomicU64,
    /// Keys held, written by every claim and release: on a cache line of its own, so that
    /// claims do not invalidate the line every lookup reads (`buckets`, `masks`).
    live: CachePadded<AtomicUsize>,
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

/// A slot a claim took, and its bucket.
#[derive(Clone, Copy)]
struct Claimed<'a> {
    slot: Slot<'a>,
    bucket: usize,
}

/// Buckets a table starts with (or all of them, if fewer): 512 slots, 8 KiB.
const INITIAL_BUCKETS: usize = 64;

/// A table that keeps a whole 64-bit value per key (see the module docs).
pub type WideTable = KeyTable<2>;

impl<const S: usize> KeyTable<S> {
    /// A table with room for at least `max_keys` keys (rounded up to a power of two).
    pub fn new(max_keys: usize) -> Self {
        Self::with_initial(max_keys, INITIAL_BUCKETS)
    }

    /// A table for `max_keys` keys that starts with `initial` buckets (a power of two) in use.
    fn with_initial(max_keys: usize, initial: usize) -> Self {
        const { assert!(S == 1 || S == 2, "a slot holds one state word, or two") };
        let slots = max_keys.max(2 * WAYS).next_power_of_two();
        let buckets = slots / WAYS;
        let active = initial.clamp(1, buckets) as u64 - 1;
        Self {
            buckets: (0..buckets).map(|_| Bucket::default()).collect(),
            max_mask: buckets - 1,
            masks: AtomicU64::new(grow::masks(active, active)),
            cursor: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            live: CachePadded(AtomicUsize::new(0)),
        }
    }

    /// How many keys fit.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Keys currently tracked.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Bytes the table occupies.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.buckets) + std::mem::size_of::<Self>()
    }

    /// The key's two buckets under `mask` (first choice first).
    fn buckets_of(key: u64, mask: usize) -> [usize; 2] {
        let first = key as usize & mask;
        let mut second = (key >> 32) as usize & mask;
        if second == first {
            second = (first + 1) & mask;
        }
        [first, second]
    }

    /// The slots of the key's two buckets under `mask` (first choice first).
    fn candidates(&self, key: u64, mask: usize) -> impl Iterator<Item = Slot<'_>> + Clone {
        let [first, second] = Self::buckets_of(key, mask);
        self.buckets[first]
            .slots()
            .chain(self.buckets[second].slots())
    }

    /// The slot `key` owns among its candidates under `mask`.
    fn find(&self, key: u64, mask: usize) -> Option<Slot<'_>> {
        self.candidates(key, mask)
            .find(|s| s.key.load(Ordering::Acquire) == key)
    }

    /// The slot `key` owns: under the active mask, or while a growth moves keys, under the
    /// previous one (and then the active one again: the key may have moved in between).
    fn find_anywhere(&self, key: u64, (mask, old): (usize, usize)) -> Option<Slot<'_>> {
        self.find(key, mask).or_else(|| {
            (old != mask)
                .then(|| self.find(key, old).or_else(|| self.find(key, mask)))
                .flatten()
        })
    }

    /// The value of `key`, if it is tracked.
    pub fn peek(&self, key: u64) -> Option<u64> {
        let key = stored(key);
        let slot = self.find_anywhere(key, self.masks())?;
        let word = slot.word.load(Ordering::Acquire);
        if slot.key.load(Ordering::Acquire) != key || word == BUSY || word >> 48 != tag(key) {
            return None;
        }
        Some(slot.value(word))
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
        self.help_grow(&victim);
        // `waits`: turns in a row that found the slot busy or missing (a holder that may
        // have lost its core); `lost`: updates of this key by others that came first (each
        // one progress, so no reason to give up soon, but a bound all the same).
        let (mut waits, mut lost) = (0, 0);
        while waits < ATTEMPTS && lost <= LOST_RACES {
            let Some(slot) = self.locate(key, &victim) else {
                backoff();
                waits += 1;
                continue;
            };
            let word = slot.word.load(Ordering::Acquire);
            if word == BUSY || word >> 48 != tag(key) {
                wait_turn(waits);
                waits += 1;
                continue;
            }
            waits = 0;
            let done = match f(slot.value(word)) {
                Update::Keep(r) => return Some(r),
                Update::Remove(r) => self.release(slot, word).then_some(r),
                Update::Write(value, r) => slot.replace(key, word, value).then_some(r),
            };
            if done.is_some() {
                return done;
            }
            lost += 1;
            after_lost_race(lost);
        }
        None
    }

    /// The slot of `key`: found, claimed empty (in the emptier of its two buckets), or taken
    /// from the best victim.
    fn locate(&self, key: u64, victim: &impl Fn(u64) -> Option<u64>) -> Option<Slot<'_>> {
        let masks = self.masks();
        if let Some(slot) = self.find_anywhere(key, masks) {
            return Some(slot);
        }
        let claimed = self.claim(key, 0, masks.0, victim, true)?;
        // A growth that began after the masks were read may already have moved the bucket
        // the key went to: place it under the new mask too (the update then retries and
        // finds it there).
        let now = self.masks().0;
        if now != masks.0 {
            self.move_if_misplaced(claimed.slot, claimed.bucket, now, victim);
        }
        self.maybe_grow(masks);
        Some(claimed.slot)
    }

    /// A slot for `key` among its candidates under `mask`, starting at `value`: an empty one
    /// (in the emptier bucket) or the best victim's. With `join`, a slot the key already has
    /// there is returned instead (claimed a moment ago by another thread).
    fn claim(
        &self,
        key: u64,
        value: u64,
        mask: usize,
        victim: &impl Fn(u64) -> Option<u64>,
        join: bool,
    ) -> Option<Claimed<'_>> {
        let which = Self::buckets_of(key, mask);
        let slots = move || {
            which
                .into_iter()
                .flat_map(move |b| self.buckets[b].slots().map(move |s| (b, s)))
        };
        let mut empty = [0usize; 2];
        for (i, (bucket, slot)) in slots().enumerate() {
            match slot.key.load(Ordering::Acquire) {
                owner if owner == key && join => return Some(Claimed { slot, bucket }),
                0 => empty[i / WAYS] += 1,
                _ => {}
            }
        }
        let emptier = usize::from(empty[1] > empty[0]);
        let order = slots()
            .skip(emptier * WAYS)
            .chain(slots().take(emptier * WAYS));
        for (bucket, slot) in order {
            let owner = slot.key.load(Ordering::Acquire);
            if owner == key && join {
                // Another thread claimed it for this key a moment ago.
                return Some(Claimed { slot, bucket });
            }
            if owner != 0 {
                continue;
            }
            match slot
                .key
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    slot.publish(key, value);
                    self.live.fetch_add(1, Ordering::Relaxed);
                    return Some(Claimed { slot, bucket });
                }
                Err(owner) if owner == key && join => return Some(Claimed { slot, bucket }),
                Err(_) => {}
            }
        }
        let (bucket, slot, word) = slots()
            .filter_map(|(b, s)| {
                let word = s.word.load(Ordering::Acquire);
                let owner = s.key.load(Ordering::Acquire);
                if word == BUSY || owner == 0 || word >> 48 != tag(owner) {
                    return None;
                }
                victim(s.value(word)).map(|rank| (rank, b, s, word))
            })
            .min_by_key(|&(rank, ..)| rank)
            .map(|(_, b, s, w)| (b, s, w))?;
        slot.word
            .compare_exchange(word, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        slot.key.store(key, Ordering::Release);
        slot.publish(key, value);
        Some(Claimed { slot, bucket })
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
            if word == BUSY || word >> 48 != tag(owner) || !idle(slot.value(word)) {
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
mod tests;
