//! Where the per-key limiters keep their state, behind one trait so a shared store (Redis)
//! can replace the in-memory one. Every operation is one atomic step on the store's side.

mod answer;
mod ask;
#[cfg(feature = "redis")]
mod hybrid;
mod keyed;
mod memory;
// The Redis store's own types (its asks, script, undo queue) are not part of the API: public
// only with the `redis-internals` feature, for the `brownout` binary's `bench redis` and the
// script's tests.
#[cfg(feature = "redis-internals")]
pub mod redis;
#[cfg(all(feature = "redis", not(feature = "redis-internals")))]
pub(crate) mod redis;
pub(crate) mod table;

pub(crate) use answer::{Answer, Part, RateAnswer};
pub(crate) use ask::MAX_QUOTAS;
#[cfg(not(feature = "redis-internals"))]
pub(crate) use ask::{BucketAsk, ClientAsk, QuotaAsk};
#[cfg(feature = "redis-internals")]
pub use ask::{BucketAsk, ClientAsk, QuotaAsk};
#[cfg(feature = "redis")]
pub(crate) use hybrid::HybridStore;
pub(crate) use keyed::{Held, Keyed};
pub use memory::MemoryStore;
#[cfg(feature = "redis-internals")]
pub use unanswered::Unanswered;
#[cfg(all(feature = "redis", not(feature = "redis-internals")))]
pub(crate) use unanswered::Unanswered;

use crate::math::gcra::Charge;
use crate::math::window::{WindowCheck, WindowRule};

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
    /// concurrent_requests' permits out.
    pub in_flight: u64,
}

/// The state operations of the per-key limiters: what [`MemoryStore`] does in process, and
/// what a store of your own (`BrownoutBuilder::store`) may do instead.
///
/// Every method has a default, so that the trait can grow without breaking a store written
/// against it: an operation a store does not provide answers an error, and the limiter that
/// asked fails open on it (counted in `brownout_fail_open_total` and logged); a give-back it
/// does not provide does nothing; it tracks no keys.
pub trait Store: Send + Sync {
    /// Reads `key`'s bucket and permits without spending or claiming anything.
    fn peek(&self, key: u64) -> Result<ClientReading, StoreError> {
        let _ = key;
        Err(StoreError::Failed(
            "this store cannot read a client without spending".into(),
        ))
    }

    /// GCRA charge of `increment` µs against `tolerance` µs for `key` at `now` µs.
    fn rate_charge(
        &self,
        key: u64,
        now: u64,
        increment: u64,
        tolerance: u64,
    ) -> Result<Charge, StoreError> {
        let _ = (key, now, increment, tolerance);
        Err(not_provided("rate_charge"))
    }

    /// Gives back a charge of `increment` µs (a later limiter rejected the request).
    fn rate_refund(&self, key: u64, increment: u64) -> Result<(), StoreError> {
        let _ = (key, increment);
        Err(not_provided("rate_refund"))
    }

    /// Counts (`add`) or only checks one request against quota `quota` for `key`; `now` is
    /// in µs since the Unix epoch (windows follow the calendar).
    fn quota_hit(
        &self,
        quota: usize,
        key: u64,
        now: u64,
        rule: &WindowRule,
        add: bool,
    ) -> Result<WindowCheck, StoreError> {
        let _ = (quota, key, now, rule, add);
        Err(not_provided("quota_hit"))
    }

    /// Takes back one counted request of quota `quota` in the window of `now`.
    fn quota_refund(
        &self,
        quota: usize,
        key: u64,
        now: u64,
        rule: &WindowRule,
    ) -> Result<(), StoreError> {
        let _ = (quota, key, now, rule);
        Err(not_provided("quota_refund"))
    }

    /// Takes one of `max` in-flight permits of `key`; `false` if all are taken.
    fn concurrency_acquire(&self, key: u64, max: u64) -> Result<bool, StoreError> {
        let _ = (key, max);
        Err(not_provided("concurrency_acquire"))
    }

    /// Returns a permit of `key`.
    fn concurrency_release(&self, key: u64) {
        let _ = key;
    }

    /// Takes one of `limit` non-critical fleet slots; `false` if all are taken.
    fn fleet_acquire(&self, limit: u64) -> Result<bool, StoreError> {
        let _ = limit;
        Err(not_provided("fleet_acquire"))
    }

    /// Returns a fleet slot.
    fn fleet_release(&self) {}

    /// Drops state that carries no information at `now` µs (full buckets; keys with nothing
    /// in flight) and at `unix_now` µs since the epoch (expired quota windows).
    fn evict_idle(&self, now: u64, unix_now: u64, quota_rules: &[WindowRule]) {
        let _ = (now, unix_now, quota_rules);
    }

    /// Keys this store tracks of `kind` (each limiter with per-key state names its kind);
    /// `None` for a kind it keeps no state of.
    fn tracked_keys(&self, kind: KeyKind) -> Option<usize> {
        let _ = kind;
        None
    }
}

/// What a store keeps per client key, by kind: what [`Store::tracked_keys`] counts. Each
/// limiter with per-key state names the kind it keeps (request_rate: charges;
/// concurrent_requests: slots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyKind {
    /// Buckets and window counters, charged per request.
    Charges,
    /// Counted slots, held while a request runs (and parked at zero).
    Slots,
}

/// The error of an operation a [`Store`] does not provide.
fn not_provided(operation: &str) -> StoreError {
    StoreError::Failed(format!("this store does not provide {operation}"))
}
