//! `store.sync: local_first`: every request decides on this process's state (no network on
//! the request path), and request_rate's buckets are reconciled with Redis in rounds: each
//! round sends the credit charged per bucket since the last one, Redis adds it to the fleet's
//! bucket (one script call for the batch), and each bucket here is set to the fleet's, plus
//! what was charged here while the round was out.
//!
//! Between rounds an instance sees the others' charges as of the last round only, so a client
//! spread over several instances can get ahead of its limit by what they admit in one round;
//! the fleet's bucket then runs that much into debt and every instance refuses until it is
//! paid back: over time the fleet admits the limit, and the overshoot at any moment is about
//! one round's worth of the client's rate per instance (measured: see docs/fleet.md).

use super::memory::MemoryStore;
use super::redis::RedisStore;
use super::{Store, StoreError, Table};
use crate::clock::Clock;
use crate::logging::LogGate;
use crate::math::gcra::{BucketCharge, Charge};
use crate::math::window::{WindowCheck, WindowRule};
use crate::shard::{my_shard, shard_count, CachePadded};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

type Activity = HashMap<u64, Credit, foldhash::fast::RandomState>;

/// What a bucket was charged on this instance since the last round (µs of bucket time, less
/// refunds), and the bucket it was last charged in (its step and tolerance, which the fleet's
/// state is carried to first, and its stamp, which the state settled here gets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Credit {
    /// µs of bucket time.
    pub credit: i64,
    /// The bucket (its increment aside).
    pub bucket: BucketCharge,
}

/// Local state, and what its buckets were charged since the last round.
pub struct HybridStore {
    local: MemoryStore,
    /// The table of buckets reconciled with the fleet's (request_rate's own).
    reconciled: Table,
    /// Per thread row: bucket key → credit charged (µs of bucket time), less refunds.
    charged: Box<[CachePadded<Mutex<Activity>>]>,
    started: AtomicBool,
}

impl std::fmt::Debug for HybridStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HybridStore").finish_non_exhaustive()
    }
}

impl HybridStore {
    /// Wraps `local`, whose bucket table `reconciled` is reconciled with the fleet's.
    pub fn new(local: MemoryStore, reconciled: Table) -> Self {
        Self {
            local,
            reconciled,
            charged: (0..shard_count())
                .map(|_| CachePadded(Mutex::new(Activity::default())))
                .collect(),
            started: AtomicBool::new(false),
        }
    }

    /// Starts the rounds with `redis`, every `interval` (once; inside a tokio runtime), until
    /// either store is dropped. `clock` is the limiters'; `on_error` counts a failed round.
    pub fn start(
        self: &Arc<Self>,
        redis: &Arc<RedisStore>,
        clock: Arc<dyn Clock>,
        interval: Duration,
        on_error: Arc<dyn Fn(&'static str) + Send + Sync>,
    ) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let (hybrid, redis) = (Arc::downgrade(self), Arc::downgrade(redis));
        tokio::spawn(rounds(hybrid, redis, clock, interval, on_error));
    }

    fn record(&self, key: u64, credit: i64, bucket: Option<BucketCharge>) {
        // Before the rounds start (or without them: `Brownout::start` never called) nothing
        // would drain what is recorded: the buckets are simply local.
        if !self.started.load(Ordering::Relaxed) {
            return;
        }
        let mut row = self.charged[my_shard()]
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = row.entry(key).or_default();
        entry.credit += credit;
        if let Some(bucket) = bucket {
            entry.bucket = bucket;
        }
    }

    /// Takes the buckets charged (or asked for, with 0) since the last call.
    pub fn drain(&self) -> Vec<(u64, Credit)> {
        let mut all = Activity::default();
        for row in self.charged.iter() {
            let taken = std::mem::take(&mut *row.0.lock().unwrap_or_else(PoisonError::into_inner));
            for (key, c) in taken {
                let entry = all.entry(key).or_default();
                entry.credit += c.credit;
                if c.bucket.step != 0 {
                    entry.bucket = c.bucket;
                }
            }
        }
        all.into_iter().collect()
    }

    /// Sets each bucket of a round to the fleet's: (key, TAT on this process's clock, 0:
    /// full, and the stamp of the bucket the fleet's state was carried to), plus what was
    /// charged here while the round was out; `now` is this process's time.
    pub fn settle(&self, now: u64, round: &[(u64, u64, u16)]) {
        // What was charged since the round was sent: each row locked once.
        let mut since = Activity::default();
        for row in self.charged.iter() {
            let row = row.0.lock().unwrap_or_else(PoisonError::into_inner);
            for (key, _, _) in round {
                if let Some(c) = row.get(key) {
                    since.entry(*key).or_default().credit += c.credit;
                }
            }
        }
        for &(key, tat, stamp) in round {
            let since = since
                .get(&key)
                .map_or(0, |c| u64::try_from(c.credit).unwrap_or(0));
            let fleet = if since > 0 { tat.max(now) + since } else { tat };
            self.local.gcra_set(self.reconciled, key, fleet, stamp);
        }
    }
}

/// Reconciles the buckets every `interval`. A round that fails is dropped (counted, logged at
/// most every 10 s): meanwhile the limits are this instance's, and its charges from then do
/// not come back later as a debt.
async fn rounds(
    hybrid: Weak<HybridStore>,
    redis: Weak<RedisStore>,
    clock: Arc<dyn Clock>,
    interval: Duration,
    on_error: Arc<dyn Fn(&'static str) + Send + Sync>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let log = LogGate::new(Duration::from_secs(10));
    loop {
        tick.tick().await;
        let (Some(hybrid), Some(redis)) = (hybrid.upgrade(), redis.upgrade()) else {
            return;
        };
        let credits = hybrid.drain();
        if credits.is_empty() {
            continue;
        }
        match redis.reconcile(&credits).await {
            Ok(round) => {
                let now = clock.now().as_micros() as u64;
                // The fleet's TATs, moved to this process's clock (0: a full bucket), in the
                // bucket each was carried to.
                let fleet = |tat: u64| tat.checked_sub(round.now).filter(|&a| a > 0);
                let local: Vec<(u64, u64, u16)> = round
                    .tats
                    .iter()
                    .zip(&credits)
                    .map(|(&(key, tat), (_, c))| {
                        (
                            key,
                            fleet(tat).map_or(0, |ahead| now + ahead),
                            c.bucket.stamp,
                        )
                    })
                    .collect();
                hybrid.settle(now, &local);
            }
            Err(e) => {
                on_error("sync");
                if let Some(held_back) = log.open(clock.now()) {
                    tracing::warn!(suppressed = held_back, "local_first: a round with Redis failed ({e}); buckets stay this instance's until it answers");
                }
            }
        }
    }
}

impl Store for HybridStore {
    fn peek(&self, table: Table, key: u64) -> Result<Option<u64>, StoreError> {
        // This instance's view (reconciled with the fleet every sync_interval).
        self.local.peek(table, key)
    }

    fn gcra(
        &self,
        table: Table,
        key: u64,
        now: u64,
        b: BucketCharge,
    ) -> Result<Charge, StoreError> {
        let charge = self.local.gcra(table, key, now, b)?;
        if table == self.reconciled {
            // A refused request charges nothing, but its bucket is reconciled all the same:
            // this instance must see what the others charge while it refuses.
            let credit = match charge {
                Charge::Allowed { .. } => i64::try_from(b.increment).unwrap_or(i64::MAX),
                Charge::Denied { .. } => 0,
            };
            self.record(key, credit, Some(b));
        }
        Ok(charge)
    }

    fn gcra_refund(&self, table: Table, key: u64, increment: u64) -> Result<(), StoreError> {
        self.local.gcra_refund(table, key, increment)?;
        if table == self.reconciled {
            self.record(key, -i64::try_from(increment).unwrap_or(i64::MAX), None);
        }
        Ok(())
    }

    fn window(
        &self,
        table: Table,
        key: u64,
        now: u64,
        rule: &WindowRule,
        count: bool,
    ) -> Result<WindowCheck, StoreError> {
        self.local.window(table, key, now, rule, count)
    }

    fn window_refund(
        &self,
        table: Table,
        key: u64,
        now: u64,
        rule: &WindowRule,
    ) -> Result<(), StoreError> {
        self.local.window_refund(table, key, now, rule)
    }

    fn slot_take(&self, table: Table, key: u64, max: u64) -> Result<bool, StoreError> {
        self.local.slot_take(table, key, max)
    }

    fn slot_give(&self, table: Table, key: u64) {
        self.local.slot_give(table, key);
    }

    fn evict_idle(&self, now: u64, unix_now: u64, windows: &[(Table, WindowRule)]) {
        self.local.evict_idle(now, unix_now, windows);
    }

    fn tracked_keys(&self, table: Table) -> Option<usize> {
        self.local.tracked_keys(table)
    }
}

#[cfg(test)]
#[path = "hybrid_tests.rs"]
mod tests;
