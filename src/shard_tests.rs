//! Tests of `shard.rs`.

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

#[test]
fn threads_beyond_the_rows_share_one_and_rows_are_reused_after_exit() {
    let c = Arc::new(Sharded::<1>::default());
    let n = shard_count() + 8;
    let barrier = Arc::new(std::sync::Barrier::new(n));
    // All alive at once: some of them have no row of their own.
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (c, barrier) = (c.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..1_000 {
                    c.add(0, 1);
                }
                barrier.wait();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(c.sum(0), 1_000 * n as i64);
    // Their rows were given back: new threads get them and keep the sum exact.
    for _ in 0..4 {
        let d = c.clone();
        std::thread::spawn(move || d.add(0, -1_000)).join().unwrap();
    }
    assert_eq!(c.sum(0), 1_000 * (n as i64 - 4));
}
