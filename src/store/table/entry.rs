//! A row of entries and the protocol of one entry: its key word, its state word and, in a
//! wide table, its mark (see the table's module docs).

use super::{pack, AtomicU64, Ordering, MAX_VALUE, VALUE_MASK, WAYS};

/// One row: its keys in one cache line, their states (`S` words an entry) in the next, so
/// looking a key up reads a single line before touching its state.
#[derive(Debug)]
#[repr(align(64))]
pub(super) struct Row<const S: usize> {
    pub(super) keys: [AtomicU64; WAYS],
    pub(super) states: [[AtomicU64; S]; WAYS],
}

impl<const S: usize> Default for Row<S> {
    fn default() -> Self {
        let zero = |_| AtomicU64::new(0);
        Self {
            keys: std::array::from_fn(zero),
            states: std::array::from_fn(|_| std::array::from_fn(zero)),
        }
    }
}

/// An entry: a key word, its state word and, in a wide table, its mark.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<'a> {
    pub(super) key: &'a AtomicU64,
    pub(super) word: &'a AtomicU64,
    pub(super) mark: Option<&'a AtomicU64>,
}

impl<const S: usize> Row<S> {
    pub(super) fn entries(&self) -> impl Iterator<Item = Entry<'_>> + Clone {
        self.keys
            .iter()
            .zip(&self.states)
            .map(|(key, state)| Entry {
                key,
                word: &state[0],
                mark: state.get(1),
            })
    }
}

impl Entry<'_> {
    /// The value behind `word` (a state word of this entry's key). In a wide entry, the mark
    /// if it goes with `word` (same low 48 bits); else a writer has swapped `word` and not
    /// yet stored its mark (or lost its core between the two), and the value reads as
    /// `word`'s low 48 bits with its top 16 at 0. Never the top bits of one write beside the
    /// low bits of another (but for two writes of the same low bits).
    #[inline]
    pub(super) fn value(&self, word: u64) -> u64 {
        let low = word & VALUE_MASK;
        match self.mark {
            None => low,
            Some(mark) => match mark.load(Ordering::Acquire) {
                whole if whole & VALUE_MASK == low => whole,
                _ => low,
            },
        }
    }

    /// `value` as this entry stores it: in a wide entry, its low 48 bits capped as the state
    /// word caps them, so that the mark and the word agree.
    #[inline]
    pub(super) fn stored(&self, value: u64) -> u64 {
        match self.mark {
            None => value,
            Some(_) => (value & !VALUE_MASK) | (value & VALUE_MASK).min(MAX_VALUE),
        }
    }

    /// The state word of `key` holding `value` (as [`stored`](Self::stored)): in a wide
    /// entry, its low 48 bits.
    #[inline]
    pub(super) fn word_of(&self, key: u64, value: u64) -> u64 {
        match self.mark {
            None => pack(key, value),
            Some(_) => pack(key, value & VALUE_MASK),
        }
    }

    /// Publishes `value` as `key`'s state: the entry is this thread's (its state word `BUSY`,
    /// or its key just claimed), so the mark goes first and the state word releases both.
    #[inline]
    pub(super) fn publish(&self, key: u64, value: u64) {
        let value = self.stored(value);
        if let Some(mark) = self.mark {
            mark.store(value, Ordering::Release);
        }
        self.word.store(self.word_of(key, value), Ordering::Release);
    }

    /// Replaces the state `word` of `key` by `value`; false if another thread changed it.
    /// One compare-and-swap commits it (no lock: a writer that loses its core holds nobody
    /// up); a wide entry's mark follows, and until it does the value reads as its low bits.
    #[inline]
    pub(super) fn replace(&self, key: u64, word: u64, value: u64) -> bool {
        let value = self.stored(value);
        let swapped = self
            .word
            .compare_exchange(
                word,
                self.word_of(key, value),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if let (true, Some(mark)) = (swapped, self.mark) {
            mark.store(value, Ordering::Release);
        }
        swapped
    }
}
