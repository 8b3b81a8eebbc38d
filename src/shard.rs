//! Counters written on every request, kept per thread: each thread adds to its own cache-padded
//! shard, and readers (the sampler, `/metrics`, `/v1/state`) sum the shards. A shard's cache
//! line stays with the core of the thread that writes it, so many workers counting at once do
//! not pass one line between them. Sums are exact: every add lands in some shard.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Shards of every counter: the machine's parallelism rounded up to a power of two, so that
/// each worker thread usually has one of its own (threads beyond that share, correctly).
fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(8, usize::from)
            .clamp(2, 256)
            .next_power_of_two()
    })
}

/// This thread's shard, handed out round-robin the first time the thread counts.
fn my_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    MINE.with(|m| *m) & (shard_count() - 1)
}

/// `N` counters, one cache-padded row of them per shard.
#[derive(Debug)]
pub(crate) struct Sharded<const N: usize> {
    rows: Box<[Row<N>]>,
}

#[derive(Debug)]
#[repr(align(128))]
struct Row<const N: usize>([AtomicI64; N]);

impl<const N: usize> Default for Sharded<N> {
    fn default() -> Self {
        Self {
            rows: (0..shard_count())
                .map(|_| Row(std::array::from_fn(|_| AtomicI64::new(0))))
                .collect(),
        }
    }
}

impl<const N: usize> Sharded<N> {
    /// Adds `n` to counter `i` in this thread's shard.
    #[inline]
    pub(crate) fn add(&self, i: usize, n: i64) {
        self.rows[my_shard()].0[i].fetch_add(n, Ordering::Relaxed);
    }

    /// Counter `i`, summed over the shards.
    pub(crate) fn sum(&self, i: usize) -> i64 {
        self.rows
            .iter()
            .map(|r| r.0[i].load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_are_exact_whatever_thread_adds_or_subtracts() {
        let c = Arc::new(Sharded::<3>::default());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        c.add(t % 3, 1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.sum(0) + c.sum(1) + c.sum(2), 80_000);
        assert_eq!(c.sum(0), 30_000);
        // An add on one thread and its undo on another still sum to nothing.
        c.add(2, 5);
        let d = c.clone();
        std::thread::spawn(move || d.add(2, -5)).join().unwrap();
        assert_eq!(c.sum(2), 20_000);
    }
}
