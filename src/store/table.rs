//! A bounded, lock-free table of per-key state: 16 bytes per entry (24 in a wide table, below),
//! allocated once for `max_keys`, of which only an active prefix is used, grown with the keys (`grow.rs`), so a
//! hundred thousand keys sit in a few MiB of cache-friendly rows whatever the cap.
//!
//! Keys are 64-bit hashes. A key lives in one of two rows of [`WAYS`] entries, chosen by its
//! low and its middle bits under the active mask (two-choice hashing keeps early evictions
//! rare); each entry is a key word and a state word. The state word carries a 16-bit tag of its key in
//! its top bits and a 48-bit value below, so an update that raced with the entry being given to
//! another key fails its compare-and-swap instead of corrupting the other key's state.
//!
//! An entry is given up in three steps: its state word is swapped to `BUSY` (which only succeeds
//! if nobody changed it), its key is cleared (or replaced), and the new owner writes a fresh
//! state word. Readers that meet `BUSY` retry. When a row is full, a new key takes the entry
//! its caller ranks as the best victim (for a token bucket: the most idle key); entries the caller
//! refuses to rank (for the concurrency limiter: keys with requests in flight) are never taken.
//!
//! Two threads claiming a brand-new key in the same instant may, rarely, each take an entry; the
//! spare copy is idle and is swept away. The worst case is one extra burst for that key.
//!
//! A *wide* table (`KeyTable<2>`) keeps a 64-bit value per key whose top 16 bits are
//! advisory: the state word holds the tag and the value's low 48 bits, as above, and is the
//! state's authority; a second word, the mark, holds the whole value (for a token bucket: its
//! TAT and the stamp of the settings that wrote it). A write commits with one
//! compare-and-swap of the state word, as in any table (no lock: a writer that loses its core
//! holds nobody up), then stores the mark. A read takes the mark's top bits only when its low
//! bits agree with the state word's; else (a writer between its two stores, or a late mark)
//! the value reads with its top bits at 0. Both words of an entry share a cache line.
//!
//! The tag is what keeps a stale update out of an entry that was given to another key meanwhile
//! (the model check in this file explores those races). Two keys with the same tag (1 in
//! 65,536 pairs) are not told apart: if one is evicted while an update of it is in flight and
//! the other takes its entry with a state word equal to the one the update read, that update
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

/// Waits longer: the entry is held by a thread that may have lost its core (a move or an
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

/// Entries per row (two cache lines).
pub const WAYS: usize = 8;
/// Largest value an entry can hold (48 bits, less one so no word equals `BUSY`).
pub const MAX_VALUE: u64 = (1 << 48) - 2;

const VALUE_MASK: u64 = (1 << 48) - 1;
const BUSY: u64 = u64::MAX;
/// Retries of one update that found its entry busy or missing before giving up (the caller
/// fails open).
const ATTEMPTS: usize = 64;
/// Compare-and-swaps one update may lose to other updates of its key before giving up
/// (each loss is another request's progress; with the backoff, a few at most in practice).
const LOST_RACES: u32 = 1_024;

mod entry;
use entry::{Entry, Row};

/// What an update does with an entry's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update<R> {
    /// Store this value and return `R`.
    Write(u64, R),
    /// Leave the value as it is and return `R`.
    Keep(R),
    /// Give the entry up (the key's state is empty again) and return `R`.
    Remove(R),
}

mod grow;

/// The table, of `S` state words per entry: 1, or 2 for a wide table. See the module docs for
/// the protocol.
#[derive(Debug)]
pub struct KeyTable<const S: usize = 1> {
    rows: Box<[Row<S>]>,
    /// The mask of every row: the table's cap.
    max_mask: usize,
    /// The active row mask (low half) and, while the keys placed under the previous one are
    /// being moved, that mask (high half; equal to the active one otherwise).
    masks: AtomicU64,
    /// Growth progress, each tagged with the previous mask in its high half: the next row
    /// of the previous prefix to hand out, and how many of them are done.
    cursor: AtomicU64,
    moved: AtomicU64,
    /// Keys held, written by every claim and release: on a cache line of its own, so that
    /// claims do not invalidate the line every lookup reads (`rows`, `masks`).
    live: CachePadded<AtomicUsize>,
}

/// Keys are stored as non-zero words: zero marks an empty entry.
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

/// An entry a claim took, and its row.
#[derive(Clone, Copy)]
struct Claimed<'a> {
    entry: Entry<'a>,
    row: usize,
}

/// Rows a table starts with (or all of them, if fewer): 512 entries, 8 KiB.
const INITIAL_ROWS: usize = 64;

/// A table that keeps a whole 64-bit value per key (see the module docs).
pub type WideTable = KeyTable<2>;

impl<const S: usize> KeyTable<S> {
    /// A table with room for at least `max_keys` keys (rounded up to a power of two).
    pub fn new(max_keys: usize) -> Self {
        Self::with_initial(max_keys, INITIAL_ROWS)
    }

    /// A table for `max_keys` keys that starts with `initial` rows (a power of two) in use.
    fn with_initial(max_keys: usize, initial: usize) -> Self {
        const { assert!(S == 1 || S == 2, "an entry holds one state word, or two") };
        let entries = max_keys.max(2 * WAYS).next_power_of_two();
        let rows = entries / WAYS;
        let active = initial.clamp(1, rows) as u64 - 1;
        Self {
            rows: (0..rows).map(|_| Row::default()).collect(),
            max_mask: rows - 1,
            masks: AtomicU64::new(grow::masks(active, active)),
            cursor: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            live: CachePadded(AtomicUsize::new(0)),
        }
    }

    /// Keys currently tracked.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// The key's two rows under `mask` (first choice first).
    fn rows_of(key: u64, mask: usize) -> [usize; 2] {
        let first = key as usize & mask;
        let mut second = (key >> 32) as usize & mask;
        if second == first {
            second = (first + 1) & mask;
        }
        [first, second]
    }

    /// The entries of the key's two rows under `mask` (first choice first).
    fn candidates(&self, key: u64, mask: usize) -> impl Iterator<Item = Entry<'_>> + Clone {
        let [first, second] = Self::rows_of(key, mask);
        self.rows[first]
            .entries()
            .chain(self.rows[second].entries())
    }

    /// The entry `key` owns among its candidates under `mask`.
    fn find(&self, key: u64, mask: usize) -> Option<Entry<'_>> {
        self.candidates(key, mask)
            .find(|s| s.key.load(Ordering::Acquire) == key)
    }

    /// The entry `key` owns: under the active mask, or while a growth moves keys, under the
    /// previous one (and then the active one again: the key may have moved in between).
    fn find_anywhere(&self, key: u64, (mask, old): (usize, usize)) -> Option<Entry<'_>> {
        self.find(key, mask).or_else(|| {
            (old != mask)
                .then(|| self.find(key, old).or_else(|| self.find(key, mask)))
                .flatten()
        })
    }

    /// The value of `key`, if it is tracked.
    pub fn peek(&self, key: u64) -> Option<u64> {
        let key = stored(key);
        let entry = self.find_anywhere(key, self.masks())?;
        let word = entry.word.load(Ordering::Acquire);
        if entry.key.load(Ordering::Acquire) != key || word == BUSY || word >> 48 != tag(key) {
            return None;
        }
        Some(entry.value(word))
    }

    /// Reads and maybe rewrites the value of `key` (0 for a key not tracked yet).
    ///
    /// `victim` ranks the values of other keys for eviction when the row is full (lowest
    /// goes first; `None` never goes). Returns `None` if no entry could be had or contention
    /// did not settle: the caller fails open.
    pub fn update<R>(
        &self,
        key: u64,
        victim: impl Fn(u64) -> Option<u64>,
        mut f: impl FnMut(u64) -> Update<R>,
    ) -> Option<R> {
        let key = stored(key);
        self.help_grow(&victim);
        // `waits`: turns in a row that found the entry busy or missing (a holder that may
        // have lost its core); `lost`: updates of this key by others that came first (each
        // one progress, so no reason to give up soon, but a bound all the same).
        let (mut waits, mut lost) = (0, 0);
        while waits < ATTEMPTS && lost <= LOST_RACES {
            let Some(entry) = self.locate(key, &victim) else {
                backoff();
                waits += 1;
                continue;
            };
            let word = entry.word.load(Ordering::Acquire);
            if word == BUSY || word >> 48 != tag(key) {
                wait_turn(waits);
                waits += 1;
                continue;
            }
            waits = 0;
            let done = match f(entry.value(word)) {
                Update::Keep(r) => return Some(r),
                Update::Remove(r) => self.release(entry, word).then_some(r),
                Update::Write(value, r) => entry.replace(key, word, value).then_some(r),
            };
            if done.is_some() {
                return done;
            }
            lost += 1;
            after_lost_race(lost);
        }
        None
    }

    /// The entry of `key`: found, claimed empty (in the emptier of its two rows), or taken
    /// from the best victim.
    fn locate(&self, key: u64, victim: &impl Fn(u64) -> Option<u64>) -> Option<Entry<'_>> {
        let masks = self.masks();
        if let Some(entry) = self.find_anywhere(key, masks) {
            return Some(entry);
        }
        let claimed = self.claim(key, 0, masks.0, victim, true)?;
        // A growth that began after the masks were read may already have moved the row
        // the key went to: place it under the new mask too (the update then retries and
        // finds it there).
        let now = self.masks().0;
        if now != masks.0 {
            self.move_if_misplaced(claimed.entry, claimed.row, now, victim);
        }
        self.maybe_grow(masks);
        Some(claimed.entry)
    }

    /// An entry for `key` among its candidates under `mask`, starting at `value`: an empty one
    /// (in the emptier row) or the best victim's. With `join`, an entry the key already has
    /// there is returned instead (claimed a moment ago by another thread).
    fn claim(
        &self,
        key: u64,
        value: u64,
        mask: usize,
        victim: &impl Fn(u64) -> Option<u64>,
        join: bool,
    ) -> Option<Claimed<'_>> {
        let which = Self::rows_of(key, mask);
        let entries = move || {
            which
                .into_iter()
                .flat_map(move |b| self.rows[b].entries().map(move |s| (b, s)))
        };
        let mut empty = [0usize; 2];
        for (i, (row, entry)) in entries().enumerate() {
            match entry.key.load(Ordering::Acquire) {
                owner if owner == key && join => return Some(Claimed { entry, row }),
                0 => empty[i / WAYS] += 1,
                _ => {}
            }
        }
        let emptier = usize::from(empty[1] > empty[0]);
        let order = entries()
            .skip(emptier * WAYS)
            .chain(entries().take(emptier * WAYS));
        for (row, entry) in order {
            let owner = entry.key.load(Ordering::Acquire);
            if owner == key && join {
                // Another thread claimed it for this key a moment ago.
                return Some(Claimed { entry, row });
            }
            if owner != 0 {
                continue;
            }
            match entry
                .key
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    entry.publish(key, value);
                    self.live.fetch_add(1, Ordering::Relaxed);
                    return Some(Claimed { entry, row });
                }
                Err(owner) if owner == key && join => return Some(Claimed { entry, row }),
                Err(_) => {}
            }
        }
        let (row, entry, word) = entries()
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
        entry
            .word
            .compare_exchange(word, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        entry.key.store(key, Ordering::Release);
        entry.publish(key, value);
        Some(Claimed { entry, row })
    }

    /// Gives `entry` up if its state word is still `word`: the word goes `BUSY` (so racing
    /// updates retry), the key is cleared, and the next owner writes its own word.
    fn release(&self, entry: Entry<'_>, word: u64) -> bool {
        let taken = entry
            .word
            .compare_exchange(word, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if taken {
            entry.key.store(0, Ordering::Release);
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
        taken
    }

    /// Drops every key whose value `idle` says carries no information; returns how many.
    pub fn sweep(&self, idle: impl Fn(u64) -> bool) -> usize {
        let mut evicted = 0;
        for entry in self.rows.iter().flat_map(Row::entries) {
            let owner = entry.key.load(Ordering::Acquire);
            if owner == 0 {
                continue;
            }
            let word = entry.word.load(Ordering::Acquire);
            if word == BUSY || word >> 48 != tag(owner) || !idle(entry.value(word)) {
                continue;
            }
            if self.release(entry, word) {
                evicted += 1;
            }
        }
        evicted
    }
}

/// A model check of the entry protocol (loom).
#[cfg(all(test, brownout_loom))]
mod model;

#[cfg(all(test, not(brownout_loom)))]
mod tests;
