//! Where the per-key limiters keep their state, behind one trait so a shared store (Redis)
//! can replace the in-memory one. Every operation is one atomic step on the store's side.

mod answer;
mod ask;
#[cfg(feature = "redis")]
mod hybrid;
mod keyed;
mod log;
mod memory;
// The Redis store's own types (its asks, script, undo queue) are not part of the API: public
// only with the `redis-internals` feature, for the `brownout` binary's `bench redis` and the
// script's tests.
#[cfg(feature = "redis-internals")]
pub mod redis;
#[cfg(all(feature = "redis", not(feature = "redis-internals")))]
pub(crate) mod redis;
pub(crate) mod table;

#[cfg(feature = "redis")]
pub(crate) use answer::wrote;
pub(crate) use answer::{Answer, Replies};
pub(crate) use ask::{AskSize, MAX_OWNERS, MAX_QUOTAS};
// The ask and the replies are public with `redis-internals`, for `bench redis` and the
// scripts' tests, which speak to the Redis store directly.
#[cfg(all(feature = "redis", not(feature = "redis-internals")))]
pub(crate) use answer::Reply;
#[cfg(feature = "redis-internals")]
pub use answer::Reply;
#[cfg(feature = "redis-internals")]
pub use ask::{Ask, Group, Op};
#[cfg(not(feature = "redis-internals"))]
pub(crate) use ask::{Ask, Op};
#[cfg(feature = "redis")]
pub(crate) use hybrid::HybridStore;
pub(crate) use keyed::{Held, Keyed};
pub use memory::MemoryStore;
#[cfg(feature = "redis-internals")]
pub use unanswered::Unanswered;
#[cfg(all(feature = "redis", not(feature = "redis-internals")))]
pub(crate) use unanswered::Unanswered;

use crate::math::gcra::{BucketCharge, Charge};
use crate::math::window::{WindowCheck, WindowRule};
use std::borrow::Cow;

/// Why a store could not answer; the limiter fails open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No slot could be had (every candidate is in use) or contention did not settle.
    #[error("the {0} table is full")]
    Full(&'static str),
    /// The store did not answer in time.
    #[error("the store timed out")]
    Timeout,
    /// The store failed.
    #[error("store error: {0}")]
    Failed(String),
}

impl StoreError {
    /// The `reason` label of `brownout_fail_open_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::Full(_) => "store_full",
            StoreError::Timeout => "store_timeout",
            StoreError::Failed(_) => "store_error",
        }
    }
}

#[cfg(feature = "redis")]
mod unanswered {
    use super::StoreError;

    /// Why the shared store did not answer a request, with the `op` label a failed call is counted
    /// under: the request is then decided on this process's store.
    #[derive(Debug, Clone, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct Unanswered {
        /// decide, fleet.
        pub op: &'static str,
        /// What went wrong.
        pub error: StoreError,
        /// No call was made: not connected yet, or the breaker is open (`reason` says which).
        pub skipped: Option<&'static str>,
    }

    impl Unanswered {
        /// A decide call that failed with `error`.
        pub(crate) fn failed(error: StoreError) -> Self {
            Self {
                op: "decide",
                error,
                skipped: None,
            }
        }

        /// The `reason` label of `brownout_fail_open_total`.
        pub fn reason(&self) -> &'static str {
            self.skipped.unwrap_or_else(|| self.error.reason())
        }
    }
}

/// Something that owns (a share of) the keyed state: what a permit keeps so that it can give
/// itself back when it is dropped, whenever and wherever that is.
pub(crate) trait KeyedHandle: Clone {
    /// The keyed state.
    fn keyed(&self) -> &Keyed;
}

/// A client's per-key state read without changing it (a peek): its bucket's TAT (µs; `None`
/// when the store keeps none for it, a full bucket) and its permits in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientReading {
    /// The request_rate bucket's theoretical arrival time, when one is kept.
    pub tat: Option<u64>,
    /// The step (µs per credit) of the bucket that wrote it, when known: a bucket of another
    /// step reads it carried ([`crate::limiter::gcra::carry`]).
    pub step: Option<u64>,
    /// concurrent_requests' permits out.
    pub in_flight: u64,
}

/// A table of per-key state in a store. Each limiter with per-key state names its own tables
/// in its folder (`Limiter::TABLES` reserves their ids, given by the limiter list in its
/// order); a store keeps each table apart and answers the same few operations on any of them,
/// whichever limiter asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Table(u8);

impl Table {
    /// The table of id `id`.
    pub const fn new(id: u8) -> Self {
        Table(id)
    }

    /// Its id: a small dense index (a store may keep its tables in an array).
    pub const fn id(self) -> usize {
        self.0 as usize
    }
}

/// What a table holds, and so which operations of [`Store`] it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TableKind {
    /// GCRA buckets, one theoretical arrival time (TAT) per key: [`Store::gcra`].
    Gcra,
    /// Window counters (fixed or sliding), one window per key: [`Store::window`].
    Window,
    /// Sliding logs, the times of a key's events still in its window (a `sliding_log`
    /// quota's): [`Store::window`], with the rule's algorithm `SlidingLog`.
    Log,
    /// Counted slots per key (a client's requests in flight): [`Store::slot_take`].
    Slots,
    /// One count of slots for the whole store, whatever the key (the fleet's non-critical
    /// requests in flight): [`Store::slot_take`].
    Pool,
}

/// A table as a limiter keeps it (`Limiter::tables`): its kind, the keys the in-memory store
/// sizes it for, and its name in a shared store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// Its id.
    pub table: Table,
    /// What it holds.
    pub kind: TableKind,
    /// Keys the in-memory store keeps at most.
    pub keys: usize,
    /// Its name in Redis: a key is `{prefix}{tag}:{name}` (`:{key}` after it when the key
    /// is not its own hash tag); a pool's is `{prefix}{name}`, hash tag included.
    pub name: Cow<'static, str>,
    /// Whether it lives in the client's hash in Redis (`{prefix}{client}:client`): a client's
    /// own bucket (field `t`) and its slots (a field each), read and written together. At
    /// most one bucket table and one slots table may.
    pub client: bool,
}

impl TableSpec {
    /// A table of `kind` sized for `keys`, named `t{id}` in Redis, outside the client's hash.
    pub fn new(table: Table, kind: TableKind, keys: usize) -> Self {
        Self {
            table,
            kind,
            keys,
            name: format!("t{}", table.id()).into(),
            client: false,
        }
    }
}

/// The per-key operations of the limiters: what [`MemoryStore`] does in process, and what a
/// store of your own (`BrownoutBuilder::store`) may do instead. Each is one atomic step on
/// the store's side, on one key of one [`Table`]; no operation names a limiter, so a limiter
/// added with tables of its own needs no new one.
///
/// No method has a default: a store provides every operation, so that a limiter's operation
/// never fails at run time for want of one. A store that cannot answer one answers an error,
/// and the limiter that asked fails open on it (counted in `brownout_fail_open_total` and
/// logged). The types the methods take, and their arithmetic, are in
/// [`crate::limiter::gcra`] and [`crate::limiter::window`].
pub trait Store: Send + Sync {
    /// Reads `key`'s value in `table` without changing it (a bucket's TAT, a key's slots
    /// taken); `None` when the store keeps none for it (a full bucket, nothing in flight).
    fn peek(&self, table: Table, key: u64) -> Result<Option<u64>, StoreError>;

    /// GCRA charge of `charge.increment` µs against `charge.tolerance` µs for `key` at `now`
    /// µs, its state carried first if a bucket of other settings (another `charge.stamp`)
    /// wrote it ([`crate::limiter::gcra::read`]).
    fn gcra(
        &self,
        table: Table,
        key: u64,
        now: u64,
        charge: BucketCharge,
    ) -> Result<Charge, StoreError>;

    /// Gives back a charge of `increment` µs (a later limiter rejected the request).
    fn gcra_refund(&self, table: Table, key: u64, increment: u64) -> Result<(), StoreError>;

    /// Counts (`count`) or only checks one request against `rule` for `key`; `now` is in µs
    /// since the Unix epoch (windows follow the calendar). A rule of algorithm `SlidingLog`
    /// comes for a [`TableKind::Log`] table: it is exact only from a log of the key's events
    /// ([`WindowRule::log_hit`]); a counter reads it as the sliding window's estimate.
    fn window(
        &self,
        table: Table,
        key: u64,
        now: u64,
        rule: &WindowRule,
        count: bool,
    ) -> Result<WindowCheck, StoreError>;

    /// Takes back one counted request in the window of `now` (a log: the event recorded at
    /// `now`).
    fn window_refund(
        &self,
        table: Table,
        key: u64,
        now: u64,
        rule: &WindowRule,
    ) -> Result<(), StoreError>;

    /// Takes one of `max` slots of `key`; `false` if all are taken.
    fn slot_take(&self, table: Table, key: u64, max: u64) -> Result<bool, StoreError>;

    /// Gives a slot of `key` back.
    fn slot_give(&self, table: Table, key: u64);

    /// Drops state that carries no information at `now` µs (full buckets; keys with nothing
    /// in flight) and at `unix_now` µs since the epoch (windows expired under the rule each
    /// window table is listed with in `windows`).
    fn evict_idle(&self, now: u64, unix_now: u64, windows: &[(Table, WindowRule)]);

    /// Keys this store tracks in `table` (for slots: keys with at least one taken); `None`
    /// for a table it keeps no count of.
    fn tracked_keys(&self, table: Table) -> Option<usize>;
}
