//! The in-memory store: lock-free [`KeyTable`]s sized from the config, plus an atomic counter
//! for the fleet. "Fleet" here is this process; a shared store makes it fleet-wide.

use super::table::{KeyTable, Update};
use super::{KeyKind, Store, StoreError};
use crate::math::gcra::{self, Charge};
use crate::math::window::{WindowCheck, WindowRule};
use crate::shard::{CachePadded, Sharded};
use std::sync::atomic::{AtomicU64, Ordering};

/// Per-key state in this process.
#[derive(Debug)]
pub struct MemoryStore {
    rate: KeyTable,
    quotas: Vec<KeyTable>,
    /// Permits in flight per key. While the table is small, a key whose last permit comes back
    /// keeps its slot at zero (the next request of that client finds it without claiming a
    /// slot again); zero slots are the first victims when a bucket is full, and the evictor
    /// drops them.
    concurrency: KeyTable,
    /// Keys with at least one permit out (counted per thread on each 0 → 1 and 1 → 0 step):
    /// what `tracked_keys` reports for the concurrency limiter.
    holders: Sharded<1>,
    /// Non-critical requests in flight. Shared by every worker on purpose: admission against
    /// `(1 - reserved) × capacity` must never admit past the limit, which per-thread counts
    /// cannot decide without summing every shard on every request (more cache misses than
    /// this one line). It costs a request two locked adds on a contended line while
    /// fleet_usage is on (`decision/plus_fleet_usage_one_key` against
    /// `decision/only_worker_utilization_one_key` in `benches/limiters.rs` measures it).
    /// On a cache line of its own, so that its writes do not evict what lookups read.
    /// Per-key state (buckets, permits) is shared by the requests of that key only.
    fleet: CachePadded<AtomicU64>,
}

impl MemoryStore {
    /// Tables for `rate_keys` request-rate keys (and as many per quota) and `concurrency_keys`
    /// keys with requests in flight (`MemoryStore::for_limiters` reads them from the
    /// settings).
    pub(crate) fn sized(rate_keys: usize, quotas: usize, concurrency_keys: usize) -> Self {
        Self {
            rate: KeyTable::new(rate_keys),
            quotas: (0..quotas).map(|_| KeyTable::new(rate_keys)).collect(),
            concurrency: KeyTable::new(concurrency_keys),
            holders: Sharded::default(),
            fleet: CachePadded(AtomicU64::new(0)),
        }
    }

    /// Sets the bucket of `key` to `tat` (a hybrid store's reconciliation with the fleet);
    /// if no slot could be had it stays as it was until the next round.
    #[cfg(feature = "redis")]
    pub(crate) fn rate_set(&self, key: u64, tat: u64) {
        self.rate
            .update(key, rate_victim, |_| Update::Write(tat, ()));
    }

    /// Non-critical requests in flight (for a moment, plus attempts about to be refused).
    pub fn fleet_in_flight(&self) -> u64 {
        self.fleet.0.load(Ordering::Relaxed)
    }
}

/// Under a key flood the most idle bucket (smallest TAT) gives up its slot first.
fn rate_victim(tat: u64) -> Option<u64> {
    Some(tat)
}

/// Keys of the concurrency table below which a key with nothing in flight keeps its slot (at
/// zero): a few clients sending one request at a time keep theirs, while many clients leave
/// the table small enough to stay in cache (on 2 cores, keeping up to 1,024 made
/// `decision/all_four_limiters_100k_keys` about 20% slower; 64 shows no difference there,
/// and saves `decision/all_four_limiters_one_key` about 10%).
const IDLE_SLOTS_UP_TO: usize = 64;

/// A key with requests in flight never gives up its slot.
fn concurrency_victim(count: u64) -> Option<u64> {
    (count == 0).then_some(0)
}

impl Store for MemoryStore {
    fn peek(&self, key: u64) -> Result<super::ClientReading, StoreError> {
        Ok(super::ClientReading {
            tat: self.rate.peek(key),
            in_flight: self.concurrency.peek(key).unwrap_or(0),
        })
    }

    fn rate_charge(
        &self,
        key: u64,
        now: u64,
        increment: u64,
        tolerance: u64,
    ) -> Result<Charge, StoreError> {
        self.rate
            .update(key, rate_victim, |tat| {
                match gcra::charge(tat, now, increment, tolerance) {
                    c @ Charge::Allowed { tat } => Update::Write(tat, c),
                    c @ Charge::Denied { .. } => Update::Keep(c),
                }
            })
            .ok_or(StoreError::Full("request_rate"))
    }

    fn rate_refund(&self, key: u64, increment: u64) -> Result<(), StoreError> {
        self.rate
            .update(key, rate_victim, |tat| {
                Update::Write(gcra::refund(tat, increment), ())
            })
            .ok_or(StoreError::Full("request_rate"))
    }

    fn quota_hit(
        &self,
        quota: usize,
        key: u64,
        now: u64,
        rule: &WindowRule,
        add: bool,
    ) -> Result<WindowCheck, StoreError> {
        let table = &self.quotas[quota];
        // Peeking an untracked key must not take a slot.
        if !add && table.peek(key).is_none() {
            return Ok(rule.hit(0, now, false).1);
        }
        table
            .update(
                key,
                |v| rule.idle(v, now).then_some(0),
                |v| match rule.hit(v, now, add) {
                    (Some(next), check) => Update::Write(next, check),
                    (None, check) => Update::Keep(check),
                },
            )
            .ok_or(StoreError::Full("quota"))
    }

    fn quota_refund(
        &self,
        quota: usize,
        key: u64,
        now: u64,
        rule: &WindowRule,
    ) -> Result<(), StoreError> {
        self.quotas[quota]
            .update(
                key,
                |_| None,
                |v| match rule.refund(v, now) {
                    Some(next) => Update::Write(next, ()),
                    None => Update::Keep(()),
                },
            )
            .ok_or(StoreError::Full("quota"))
    }

    fn concurrency_acquire(&self, key: u64, max: u64) -> Result<bool, StoreError> {
        let (acquired, first) = self
            .concurrency
            .update(key, concurrency_victim, |count| {
                if count < max {
                    Update::Write(count + 1, (true, count == 0))
                } else {
                    Update::Keep((false, false))
                }
            })
            .ok_or(StoreError::Full("concurrent_requests"))?;
        if first {
            self.holders.add(0, 1);
        }
        Ok(acquired)
    }

    fn concurrency_release(&self, key: u64) {
        // The slot cannot be evicted while its count is above zero, so it is found. While the
        // table is small, the last permit leaves the slot at zero: a client sending one request
        // at a time then neither claims nor frees a slot per request (a scan of two buckets and
        // four more writes). Past `IDLE_SLOTS_UP_TO` keys it gives the slot up at once, so that
        // many clients do not spread the table beyond the cache.
        let keep = self.concurrency.live() <= IDLE_SLOTS_UP_TO;
        let last = self
            .concurrency
            .update(key, concurrency_victim, |count| match count {
                0 | 1 if keep => Update::Write(0, count == 1),
                0 | 1 => Update::Remove(count == 1),
                _ => Update::Write(count - 1, false),
            });
        if last == Some(true) {
            self.holders.add(0, -1);
        }
    }

    fn fleet_acquire(&self, limit: u64) -> Result<bool, StoreError> {
        // One locked add, never a compare-and-swap loop (which retries under contention): an
        // attempt over the limit takes its add back. Racing attempts may see each other's
        // adds for a moment and refuse early; the count never admits past the limit.
        if self.fleet.0.fetch_add(1, Ordering::AcqRel) < limit {
            return Ok(true);
        }
        self.fleet.0.fetch_sub(1, Ordering::AcqRel);
        Ok(false)
    }

    fn fleet_release(&self) {
        // Releases match admissions one for one; a stray one is taken back, never below zero.
        if self.fleet.0.fetch_sub(1, Ordering::AcqRel) == 0 {
            self.fleet.0.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn evict_idle(&self, now: u64, unix_now: u64, quota_rules: &[WindowRule]) {
        self.rate.sweep(|tat| tat <= now);
        for (table, rule) in self.quotas.iter().zip(quota_rules) {
            table.sweep(|v| rule.idle(v, unix_now));
        }
        self.concurrency.sweep(|count| count == 0);
    }

    fn tracked_keys(&self, kind: KeyKind) -> Option<usize> {
        Some(match kind {
            KeyKind::Charges => {
                self.rate.live() + self.quotas.iter().map(KeyTable::live).sum::<usize>()
            }
            KeyKind::Slots => self.holders.sum(0).max(0) as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::QuotaAlgorithm;

    #[test]
    fn full_buckets_are_evicted_and_counted() {
        let s = MemoryStore::sized(64, 0, 64);
        s.rate_charge(1, 0, 100, 1_000).unwrap();
        s.rate_charge(2, 0, 900, 1_000).unwrap();
        assert_eq!(s.tracked_keys(KeyKind::Charges).unwrap(), 2);
        // At 500 µs key 1 is full again (TAT 100), key 2 is not (TAT 900).
        s.evict_idle(500, 0, &[]);
        assert_eq!(s.tracked_keys(KeyKind::Charges).unwrap(), 1);
        s.evict_idle(900, 0, &[]);
        assert_eq!(s.tracked_keys(KeyKind::Charges).unwrap(), 0);
    }

    #[test]
    fn an_idle_key_keeps_its_slot_only_while_the_table_is_small() {
        let s = MemoryStore::sized(64, 0, 1 << 14);
        assert!(s.concurrency_acquire(7, 2).unwrap());
        s.concurrency_release(7);
        assert_eq!(
            s.tracked_keys(KeyKind::Slots).unwrap(),
            0,
            "nothing in flight"
        );
        assert_eq!(s.concurrency.live(), 1, "the slot stays, at zero");
        assert_eq!(s.concurrency.peek(7), Some(0));
        // Fill the table past the threshold with keys that have a permit out.
        for k in 100..100 + IDLE_SLOTS_UP_TO as u64 {
            assert!(s.concurrency_acquire(k, 2).unwrap());
        }
        assert_eq!(s.tracked_keys(KeyKind::Slots).unwrap(), IDLE_SLOTS_UP_TO);
        let live = s.concurrency.live();
        s.concurrency_release(100);
        assert_eq!(
            s.concurrency.live(),
            live - 1,
            "now the last permit frees the slot"
        );
        assert_eq!(s.concurrency.peek(100), None);
        assert_eq!(
            s.tracked_keys(KeyKind::Slots).unwrap(),
            IDLE_SLOTS_UP_TO - 1
        );
    }

    #[test]
    fn concurrency_permits_count_and_release() {
        let s = MemoryStore::sized(64, 0, 64);
        assert!(s.concurrency_acquire(7, 2).unwrap());
        assert!(s.concurrency_acquire(7, 2).unwrap());
        assert!(!s.concurrency_acquire(7, 2).unwrap());
        s.concurrency_release(7);
        assert!(s.concurrency_acquire(7, 2).unwrap());
        s.concurrency_release(7);
        assert_eq!(
            s.tracked_keys(KeyKind::Slots).unwrap(),
            1,
            "one permit still out"
        );
        s.concurrency_release(7);
        assert_eq!(
            s.tracked_keys(KeyKind::Slots).unwrap(),
            0,
            "the last release frees the key, no sweep needed"
        );
        s.concurrency_release(7); // a stray release takes no slot
    }

    #[test]
    fn fleet_slots_are_bounded() {
        let s = MemoryStore::sized(64, 0, 64);
        assert!(s.fleet_acquire(2).unwrap());
        assert!(s.fleet_acquire(2).unwrap());
        assert!(!s.fleet_acquire(2).unwrap());
        s.fleet_release();
        assert_eq!(s.fleet_in_flight(), 1);
        s.fleet_release();
        s.fleet_release(); // never below zero
        assert_eq!(s.fleet_in_flight(), 0);
    }

    #[test]
    fn quota_peek_takes_no_slot() {
        let rule = WindowRule {
            algorithm: QuotaAlgorithm::FixedWindow,
            limit: 2,
            window: 1_000_000,
        };
        let s = MemoryStore::sized(64, 1, 64);
        assert!(s.quota_hit(0, 9, 0, &rule, false).unwrap().allowed);
        assert_eq!(s.tracked_keys(KeyKind::Charges).unwrap(), 0);
        assert!(s.quota_hit(0, 9, 0, &rule, true).unwrap().allowed);
        assert!(s.quota_hit(0, 9, 0, &rule, true).unwrap().allowed);
        assert!(!s.quota_hit(0, 9, 0, &rule, true).unwrap().allowed);
        s.quota_refund(0, 9, 0, &rule).unwrap();
        assert!(s.quota_hit(0, 9, 0, &rule, true).unwrap().allowed);
    }
}
