//! The in-memory store: lock-free [`KeyTable`]s sized from the config, one per table a
//! limiter keeps, and an atomic counter for a pool of slots (the fleet's). "Fleet" here is
//! this process; a shared store makes it fleet-wide.

use super::log::LogTable;
use super::table::{KeyTable, Update, WideTable};
use super::{Store, StoreError, Table, TableKind, TableSpec};
use crate::math::gcra::{self, BucketCharge, Charge};
use crate::math::window::{WindowCheck, WindowRule};
use crate::schema::QuotaAlgorithm;
use crate::shard::{CachePadded, Sharded};
use std::sync::atomic::{AtomicU64, Ordering};

/// Per-key state in this process: its tables, by id.
#[derive(Debug)]
pub struct MemoryStore {
    tables: Box<[LocalTable]>,
}

/// One table's state.
#[derive(Debug)]
enum LocalTable {
    /// No table of this id (its limiter keeps none under these settings).
    None,
    /// GCRA buckets: a TAT per key and the stamp of the settings that wrote it
    /// ([`gcra::pack`]), whole in a wide table (24 bytes a key).
    Gcra(WideTable),
    /// Windows: a packed window per key.
    Window(KeyTable),
    /// Sliding logs: a key's event times (sliding_log quotas).
    Log(LogTable),
    /// Slots taken per key. While the table is small, a key whose last slot comes back
    /// keeps its entry at zero (the next request of that client finds it without claiming an
    /// entry again); zero entries are the first victims when a bucket is full, and the
    /// evictor drops them.
    Slots {
        table: KeyTable,
        /// Keys with at least one slot taken (counted per thread on each 0 → 1 and 1 → 0
        /// step): what `tracked_keys` reports.
        holders: Sharded<1>,
    },
    /// Slots taken in the whole pool. Shared by every worker on purpose: admission against
    /// `(1 - reserved) × capacity` must never admit past the limit, which per-thread counts
    /// cannot decide without summing every shard on every request (more cache misses than
    /// this one line). It costs a request two locked adds on a contended line while
    /// fleet_usage is on (`decision/plus_fleet_usage_one_key` against
    /// `decision/only_worker_utilization_one_key` in `benches/limiters.rs` measures it).
    /// On a cache line of its own, so that its writes do not evict what lookups read.
    Pool(CachePadded<AtomicU64>),
}

impl MemoryStore {
    /// The tables of `specs`, each allocated once, here (`MemoryStore::for_limiters` lists
    /// them from the settings).
    pub(crate) fn with_tables(specs: &[TableSpec]) -> Self {
        let n = specs.iter().map(|s| s.table.id() + 1).max().unwrap_or(0);
        let mut tables: Vec<LocalTable> = (0..n).map(|_| LocalTable::None).collect();
        for spec in specs {
            tables[spec.table.id()] = match spec.kind {
                TableKind::Gcra => LocalTable::Gcra(WideTable::new(spec.keys)),
                TableKind::Window => LocalTable::Window(KeyTable::new(spec.keys)),
                TableKind::Log => LocalTable::Log(LogTable::new(spec.keys)),
                TableKind::Slots => LocalTable::Slots {
                    table: KeyTable::new(spec.keys),
                    holders: Sharded::default(),
                },
                TableKind::Pool => LocalTable::Pool(CachePadded(AtomicU64::new(0))),
            };
        }
        Self {
            tables: tables.into_boxed_slice(),
        }
    }

    #[inline]
    fn kept(&self, table: Table) -> &LocalTable {
        self.tables.get(table.id()).unwrap_or(&LocalTable::None)
    }

    /// Sets the bucket of `key` in `table` to `tat`, written by the bucket of `stamp` (a
    /// hybrid store's reconciliation with the fleet); if no slot could be had it stays as it
    /// was until the next round.
    #[cfg(feature = "redis")]
    pub(crate) fn gcra_set(&self, table: Table, key: u64, tat: u64, stamp: u16) {
        if let LocalTable::Gcra(t) = self.kept(table) {
            t.update(key, gcra_victim, |_| {
                Update::Write(gcra::pack(tat, stamp), ())
            });
        }
    }
}

/// The error of a table the store was not built with, or asked an operation of another kind.
fn no_table(table: Table, operation: &str) -> StoreError {
    StoreError::Failed(format!(
        "table {} does not answer {operation} in this store",
        table.id()
    ))
}

/// Under a key flood the most idle bucket (smallest TAT) gives up its slot first.
fn gcra_victim(v: u64) -> Option<u64> {
    Some(gcra::unpack(v).0)
}

/// Keys of a slots table below which a key with nothing taken keeps its entry (at zero): a
/// few clients sending one request at a time keep theirs, while many clients leave the table
/// small enough to stay in cache (on 2 cores, keeping up to 1,024 made
/// `decision/all_four_limiters_100k_keys` about 20% slower; 64 shows no difference there,
/// and saves `decision/all_four_limiters_one_key` about 10%).
const IDLE_SLOTS_UP_TO: usize = 64;

/// A key with slots taken never gives up its entry.
fn slots_victim(count: u64) -> Option<u64> {
    (count == 0).then_some(0)
}

impl Store for MemoryStore {
    fn peek(&self, table: Table, key: u64) -> Result<Option<u64>, StoreError> {
        match self.kept(table) {
            LocalTable::Gcra(t) => Ok(t.peek(key)),
            LocalTable::Window(t) | LocalTable::Slots { table: t, .. } => Ok(t.peek(key)),
            LocalTable::Log(t) => Ok(t.peek(key)),
            LocalTable::Pool(count) => Ok(Some(count.0.load(Ordering::Relaxed))),
            LocalTable::None => Err(no_table(table, "peek")),
        }
    }

    #[inline]
    fn gcra(
        &self,
        table: Table,
        key: u64,
        now: u64,
        b: BucketCharge,
    ) -> Result<Charge, StoreError> {
        let LocalTable::Gcra(t) = self.kept(table) else {
            return Err(no_table(table, "gcra"));
        };
        t.update(key, gcra_victim, |v| {
            let (tat, carried) = gcra::read(v, now, &b);
            match gcra::charge(tat, now, b.increment, b.tolerance) {
                c @ Charge::Allowed { tat } => Update::Write(gcra::pack(tat, b.stamp), c),
                // Refused, but what it owes is kept as the new bucket reads it.
                c @ Charge::Denied { .. } if carried => Update::Write(gcra::pack(tat, b.stamp), c),
                c @ Charge::Denied { .. } => Update::Keep(c),
            }
        })
        .ok_or(StoreError::Full("bucket"))
    }

    fn gcra_refund(&self, table: Table, key: u64, increment: u64) -> Result<(), StoreError> {
        let LocalTable::Gcra(t) = self.kept(table) else {
            return Err(no_table(table, "gcra_refund"));
        };
        // Given back in the state as it stands, whatever bucket wrote it last.
        t.update(key, gcra_victim, |v| {
            let (tat, stamp) = gcra::unpack(v);
            Update::Write(gcra::pack(gcra::refund(tat, increment), stamp), ())
        })
        .ok_or(StoreError::Full("bucket"))
    }

    fn window(
        &self,
        table: Table,
        key: u64,
        now: u64,
        rule: &WindowRule,
        count: bool,
    ) -> Result<WindowCheck, StoreError> {
        let t = match self.kept(table) {
            // A log's rule on a counter would answer an estimate, silently: a table listed
            // with the wrong kind fails open instead (counted).
            LocalTable::Window(_) if rule.algorithm == QuotaAlgorithm::SlidingLog => {
                return Err(no_table(table, "a sliding log"));
            }
            LocalTable::Window(t) => t,
            LocalTable::Log(log) => {
                return log
                    .hit(key, now, rule, count)
                    .ok_or(StoreError::Full("log"));
            }
            LocalTable::None
            | LocalTable::Gcra(_)
            | LocalTable::Slots { .. }
            | LocalTable::Pool(_) => {
                return Err(no_table(table, "window"));
            }
        };
        // Peeking an untracked key must not take a slot.
        if !count && t.peek(key).is_none() {
            return Ok(rule.hit(0, now, false).1);
        }
        t.update(
            key,
            |v| rule.idle(v, now).then_some(0),
            |v| match rule.hit(v, now, count) {
                (Some(next), check) => Update::Write(next, check),
                (None, check) => Update::Keep(check),
            },
        )
        .ok_or(StoreError::Full("window"))
    }

    fn window_refund(
        &self,
        table: Table,
        key: u64,
        now: u64,
        rule: &WindowRule,
    ) -> Result<(), StoreError> {
        let t = match self.kept(table) {
            LocalTable::Window(t) => t,
            LocalTable::Log(log) => {
                log.refund(key, now, rule);
                return Ok(());
            }
            LocalTable::None
            | LocalTable::Gcra(_)
            | LocalTable::Slots { .. }
            | LocalTable::Pool(_) => {
                return Err(no_table(table, "window_refund"));
            }
        };
        t.update(
            key,
            |_| None,
            |v| match rule.refund(v, now) {
                Some(next) => Update::Write(next, ()),
                None => Update::Keep(()),
            },
        )
        .ok_or(StoreError::Full("window"))
    }

    #[inline]
    fn slot_take(&self, table: Table, key: u64, max: u64) -> Result<bool, StoreError> {
        match self.kept(table) {
            LocalTable::Slots { table, holders } => {
                let (taken, first) = table
                    .update(key, slots_victim, |count| {
                        if count < max {
                            Update::Write(count + 1, (true, count == 0))
                        } else {
                            Update::Keep((false, false))
                        }
                    })
                    .ok_or(StoreError::Full("slots"))?;
                if first {
                    holders.add(0, 1);
                }
                Ok(taken)
            }
            LocalTable::Pool(count) => {
                // One locked add, never a compare-and-swap loop (which retries under
                // contention): an attempt over the limit takes its add back. Racing attempts
                // may see each other's adds for a moment and refuse early; the count never
                // admits past the limit.
                if count.0.fetch_add(1, Ordering::AcqRel) < max {
                    return Ok(true);
                }
                count.0.fetch_sub(1, Ordering::AcqRel);
                Ok(false)
            }
            LocalTable::None | LocalTable::Gcra(_) | LocalTable::Window(_) | LocalTable::Log(_) => {
                Err(no_table(table, "slot_take"))
            }
        }
    }

    #[inline]
    fn slot_give(&self, table: Table, key: u64) {
        match self.kept(table) {
            LocalTable::Slots { table, holders } => {
                // The entry cannot be evicted while its count is above zero, so it is found.
                // While the table is small, the last slot leaves the entry at zero: a client
                // sending one request at a time then neither claims nor frees an entry per
                // request (a scan of two buckets and four more writes). Past
                // `IDLE_SLOTS_UP_TO` keys it gives the entry up at once, so that many clients
                // do not spread the table beyond the cache.
                let keep = table.live() <= IDLE_SLOTS_UP_TO;
                let last = table.update(key, slots_victim, |count| match count {
                    0 | 1 if keep => Update::Write(0, count == 1),
                    0 | 1 => Update::Remove(count == 1),
                    _ => Update::Write(count - 1, false),
                });
                if last == Some(true) {
                    holders.add(0, -1);
                }
            }
            // The hold gives the slot back. Gives match takes one for one; a stray one (the
            // count was already zero) is taken back, so it never goes below zero.
            LocalTable::Pool(count) => {
                if count.0.fetch_sub(1, Ordering::AcqRel) == 0 {
                    count.0.fetch_add(1, Ordering::AcqRel);
                }
            }
            LocalTable::None | LocalTable::Gcra(_) | LocalTable::Window(_) | LocalTable::Log(_) => {
            }
        }
    }

    fn evict_idle(&self, now: u64, unix_now: u64, windows: &[(Table, WindowRule)]) {
        for kept in self.tables.iter() {
            match kept {
                LocalTable::Gcra(t) => {
                    t.sweep(|v| gcra::unpack(v).0 <= now);
                }
                LocalTable::Slots { table, .. } => {
                    table.sweep(|count| count == 0);
                }
                // Windows and logs are swept under their rules below; a pool holds no keys.
                LocalTable::None
                | LocalTable::Window(_)
                | LocalTable::Log(_)
                | LocalTable::Pool(_) => {}
            }
        }
        for (table, rule) in windows {
            match self.kept(*table) {
                LocalTable::Window(t) => {
                    t.sweep(|v| rule.idle(v, unix_now));
                }
                LocalTable::Log(t) => t.sweep(rule, unix_now),
                LocalTable::None
                | LocalTable::Gcra(_)
                | LocalTable::Slots { .. }
                | LocalTable::Pool(_) => {}
            }
        }
    }

    fn tracked_keys(&self, table: Table) -> Option<usize> {
        match self.kept(table) {
            LocalTable::Gcra(t) => Some(t.live()),
            LocalTable::Window(t) => Some(t.live()),
            LocalTable::Log(t) => Some(t.live()),
            LocalTable::Slots { holders, .. } => Some(holders.sum(0).max(0) as usize),
            LocalTable::Pool(_) | LocalTable::None => None,
        }
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
