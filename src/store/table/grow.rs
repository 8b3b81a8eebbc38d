//! Growing the active prefix of a [`KeyTable`] with its keys, without stopping anyone.
//!
//! The table is allocated for its cap, but keys are placed under an *active* row mask that
//! starts small, so that a few thousand keys share a few cache-friendly KiB instead of being
//! spread over the whole allocation. When more than half of the active entries are taken, the
//! mask doubles. A key placed under the old mask may now belong elsewhere (its row under
//! the new mask is the old one or the old one plus the old size), so the keys of the old
//! prefix are moved, a row at a time, by the updates that come along (`help_grow`): no
//! request waits for the whole move.
//!
//! While keys move, lookups search the new candidates, then the old ones, then the new ones
//! again (a key moved in between is found: its new entry is written before its old one is
//! cleared). A key is moved by swapping its state word to `BUSY` (its updates retry), writing
//! it into an entry under the new mask, and clearing the old entry. The counters that hand out
//! and count the old rows carry the old mask in their high half, so a late step of one
//! growth can never be counted in the next. When every old row is done, the old mask is
//! retired and lookups search one place again.
//!
//! A key that finds no room under the new mask (every candidate entry taken by keys the caller
//! will not evict) stays where it is: it is no longer found once the move ends, and the sweep
//! drops it when it is idle. With the mask doubled at half load, that takes 16 entries around
//! one key full of unevictable keys.

use super::{backoff, tag, Entry, KeyTable, Ordering, ATTEMPTS, BUSY};

const LOW: u64 = u32::MAX as u64;

/// The packed (active, previous) masks.
pub(super) fn masks(active: u64, previous: u64) -> u64 {
    (previous << 32) | active
}

impl<const S: usize> KeyTable<S> {
    /// The active mask and, while keys move, the previous one (else the active one again).
    #[inline]
    pub(super) fn masks(&self) -> (usize, usize) {
        let m = self.masks.load(Ordering::Acquire);
        ((m & LOW) as usize, (m >> 32) as usize)
    }

    /// Doubles the active prefix when more than half of it is taken (and no move is under way).
    pub(super) fn maybe_grow(&self, (mask, old): (usize, usize)) {
        if mask != old || mask >= self.max_mask || self.live() * 2 <= (mask + 1) * super::WAYS {
            return;
        }
        let grown = (mask * 2 + 1) as u64;
        let mask = mask as u64;
        if self
            .masks
            .compare_exchange(
                masks(mask, mask),
                masks(grown, mask),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            // Until these are set, helpers see another growth's tag and wait.
            self.moved.store(mask << 32, Ordering::Release);
            self.cursor.store(mask << 32, Ordering::Release);
        }
    }

    /// Moves one row of the previous prefix, if a growth is under way. (Inlined: every
    /// table operation asks, and nearly always the answer is one load and a compare.)
    #[inline]
    pub(super) fn help_grow(&self, victim: &impl Fn(u64) -> Option<u64>) {
        let (mask, old) = self.masks();
        if mask != old {
            self.help_move(mask, old, victim);
        }
    }

    /// [`help_grow`](Self::help_grow) while a growth is under way.
    #[cold]
    #[inline(never)]
    fn help_move(&self, mask: usize, old: usize, victim: &impl Fn(u64) -> Option<u64>) {
        let tag_of = (old as u64) << 32;
        let row = loop {
            let c = self.cursor.load(Ordering::Acquire);
            let next = (c & LOW) as usize;
            if c & !LOW != tag_of || next > old {
                return; // not yet set up for this growth, or every row handed out
            }
            if self
                .cursor
                .compare_exchange(c, c + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break next;
            }
        };
        for entry in self.rows[row].entries() {
            self.move_if_misplaced(entry, row, mask, victim);
        }
        let done = self.moved.fetch_add(1, Ordering::AcqRel) + 1;
        if done == tag_of | (old as u64 + 1) {
            // Every row of the previous prefix is done: search one place again.
            let _ = self.masks.compare_exchange(
                masks(mask as u64, old as u64),
                masks(mask as u64, mask as u64),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// Moves the key of `entry` (in `row`) under `mask`, unless it already belongs there.
    pub(super) fn move_if_misplaced(
        &self,
        entry: Entry<'_>,
        row: usize,
        mask: usize,
        victim: &impl Fn(u64) -> Option<u64>,
    ) {
        for _ in 0..ATTEMPTS {
            let owner = entry.key.load(Ordering::Acquire);
            if owner == 0 || Self::rows_of(owner, mask).contains(&row) {
                return;
            }
            let word = entry.word.load(Ordering::Acquire);
            if word == BUSY || word >> 48 != tag(owner) {
                backoff();
                continue;
            }
            if entry
                .word
                .compare_exchange(word, BUSY, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            // The key is ours to move; its updates retry until it is in its new place.
            // Into an entry of its own, even if the key also has one there (a rare duplicate
            // claim): its value is kept, as it would have been without the move.
            match self.claim(owner, entry.value(word), mask, victim, false) {
                Some(_) => {
                    entry.key.store(0, Ordering::Release);
                    self.live.fetch_sub(1, Ordering::Relaxed);
                }
                // No room: it stays (see the module docs).
                None => entry.word.store(word, Ordering::Release),
            }
            return;
        }
    }
}
