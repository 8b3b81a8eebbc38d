//! Counters written on every request, kept per thread: each thread adds to its own cache-padded
//! shard, and readers (the sampler, `/metrics`, `/v1/state`) sum the shards. A shard's cache
//! line stays with the core of the thread that writes it, so many workers counting at once do
//! not pass one line between them. Sums are exact: every add lands in some shard.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Rows of every counter: row 0 is shared by the threads that have no row of their own; each
/// of the others belongs to one live thread at a time, which writes it with a plain load and
/// store (no locked instruction, which costs far more than a plain store once cores contend).
pub(crate) fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(8, usize::from);
        (cores * 2 + 1).clamp(3, 257)
    })
}

/// Which rows are taken by a live thread (index 0, the shared row, always is).
fn taken() -> &'static Mutex<Vec<bool>> {
    static TAKEN: OnceLock<Mutex<Vec<bool>>> = OnceLock::new();
    TAKEN.get_or_init(|| {
        let mut rows = vec![false; shard_count()];
        rows[0] = true;
        Mutex::new(rows)
    })
}

/// A thread's row: its own until the thread exits, or the shared one.
struct Lease(usize);

impl Lease {
    fn take() -> Self {
        let Ok(mut rows) = taken().lock() else {
            return Self(0);
        };
        match rows.iter().position(|t| !t) {
            Some(i) => {
                rows[i] = true;
                Self(i)
            }
            None => Self(0),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.0 != 0 {
            if let Ok(mut rows) = taken().lock() {
                rows[self.0] = false;
            }
        }
    }
}

thread_local! {
    static MINE: Lease = Lease::take();
}

/// This thread's row (0, the shared row, also while the thread is being torn down).
#[inline]
pub(crate) fn my_shard() -> usize {
    MINE.try_with(|m| m.0).unwrap_or(0)
}

/// A value alone on its cache line (two lines, for adjacent-line prefetch): what one core
/// writes often stays out of the lines that others read.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// `N` counters, one cache-padded row of them per shard.
#[derive(Debug)]
pub(crate) struct Sharded<const N: usize> {
    rows: Box<[CachePadded<[AtomicI64; N]>]>,
}

impl<const N: usize> Default for Sharded<N> {
    fn default() -> Self {
        Self {
            rows: (0..shard_count())
                .map(|_| CachePadded(std::array::from_fn(|_| AtomicI64::new(0))))
                .collect(),
        }
    }
}

impl<const N: usize> Sharded<N> {
    /// Adds `n` to counter `i` in this thread's shard.
    #[inline]
    pub(crate) fn add(&self, i: usize, n: i64) {
        let row = my_shard();
        let counter = &self.rows[row].0[i];
        if row == 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        } else {
            // This thread is the row's only writer: a load and a store cannot lose an add.
            counter.store(
                counter.load(Ordering::Relaxed).wrapping_add(n),
                Ordering::Relaxed,
            );
        }
    }

    /// Counter `i`, summed over the shards.
    pub(crate) fn sum(&self, i: usize) -> i64 {
        self.rows
            .iter()
            .map(|r| r.0[i].load(Ordering::Relaxed))
            .fold(0i64, i64::wrapping_add)
    }
}

#[cfg(test)]
#[path = "shard_tests.rs"]
mod tests;
