//! Memory of keyed state, measured with a counting allocator (and the RSS from /proc):
//! bytes per tracked key at 1M keys, beside governor 0.10's DashMap store, and the peak under
//! a flood of 10M distinct keys with `max_keys: 1_000_000`.
//!
//! `cargo bench --bench memory`
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

use brownout::clock::{Clock, SystemClock};
use brownout::limiter::gcra::Bucket;
use brownout::limiter::LimiterName;
use brownout::store::{MemoryStore, Store, Table};

/// request_rate's buckets.
const BUCKETS: Table = LimiterName::RequestRate.table(0);
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grow(by: usize) {
    let now = CURRENT.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grow(new_size - layout.size());
        } else {
            CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Resident set size in bytes (Linux).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4096)
}

const MILLION: u64 = 1_000_000;

/// Charges one request for each of `n` distinct keys.
fn fill(store: &MemoryStore, n: u64) {
    let bucket = Bucket::new(100.0, 500.0, 0.0);
    let clock = SystemClock::new();
    for i in 0..n {
        let now = clock.now().as_micros() as u64;
        let key = brownout::rng::mix(i);
        store.gcra(BUCKETS, key, now, bucket.charging(1)).unwrap();
    }
}

fn ours_at_one_million() {
    let (heap0, rss0) = (CURRENT.load(Ordering::Relaxed), rss());
    let store = memory_store(MILLION as usize, 8);
    fill(&store, MILLION);
    report(
        "brownout   1M keys inserted, max_keys 1M:",
        store.tracked_keys(BUCKETS).unwrap_or(0),
        heap0,
        rss0,
    );
}

/// Prints bytes per tracked key since `heap0` and `rss0`.
fn report(what: &str, tracked: usize, heap0: usize, rss0: usize) {
    let heap = CURRENT.load(Ordering::Relaxed) - heap0;
    let rss_delta = rss().saturating_sub(rss0);
    println!(
        "{what} tracked {tracked}, heap {heap} B = {:.1} B/key, RSS +{rss_delta} B = {:.1} B/key",
        heap as f64 / tracked as f64,
        rss_delta as f64 / tracked as f64
    );
}

fn governor_at_one_million() {
    let (heap0, rss0) = (CURRENT.load(Ordering::Relaxed), rss());
    let n = NonZeroU32::new(500).unwrap();
    let gov: DefaultKeyedRateLimiter<u64> = RateLimiter::keyed(Quota::per_second(n));
    for i in 0..MILLION {
        let _ = gov.check_key(&brownout::rng::mix(i));
    }
    report(
        "governor   1M keys inserted (DashMap):     ",
        gov.len(),
        heap0,
        rss0,
    );
}

fn flood() {
    PEAK.store(CURRENT.load(Ordering::Relaxed), Ordering::Relaxed);
    let base = CURRENT.load(Ordering::Relaxed);
    let store = memory_store(MILLION as usize, 8);
    let start = Instant::now();
    fill(&store, 10 * MILLION);
    let elapsed = start.elapsed();
    let peak = PEAK.load(Ordering::Relaxed) - base;
    println!(
        "flood      10M distinct keys, max_keys 1M: tracked {} at the end, peak heap {peak} B ({:.1} MiB; the cap's budget is 24 B x 2^20 = 24 MiB), {:.0} ns/key",
        store.tracked_keys(BUCKETS).unwrap_or(0),
        peak as f64 / (1 << 20) as f64,
        elapsed.as_nanos() as f64 / (10 * MILLION) as f64
    );
}

fn main() {
    // `cargo bench` passes --bench; any filter argument is ignored.
    ours_at_one_million();
    governor_at_one_million();
    flood();
}

/// A memory store sized as a configuration with these `max_keys` would size it.
fn memory_store(rate_keys: usize, concurrency_keys: usize) -> MemoryStore {
    let mut limiters = brownout::config::LimitersConfig::default();
    limiters.request_rate.max_keys = rate_keys;
    limiters.concurrent_requests.max_keys = concurrency_keys;
    MemoryStore::for_limiters(&limiters)
}
