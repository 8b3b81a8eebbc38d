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

/// The state operations of the per-key limiters.
pub trait Store: Send + Sync {
    /// Reads `key`'s bucket and permits without spending or claiming anything. By default a
    /// store cannot (an error says so).
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
    ) -> Result<Charge, StoreError>;

    /// Gives back a charge of `increment` µs (a later limiter rejected the request).
    fn rate_refund(&self, key: u64, increment: u64) -> Result<(), StoreError>;

    /// Counts (`add`) or only checks one request against quota `quota` for `key`; `now` is
    /// in µs since the Unix epoch (windows follow the calendar).
    fn quota_hit(
        &self,
        quota: usize,
        key: u64,
        now: u64,
        rule: &WindowRule,
        add: bool,
    ) -> Result<WindowCheck, StoreError>;

    /// Takes back one counted request of quota `quota` in the window of `now`.
    fn quota_refund(
        &self,
        quota: usize,
        key: u64,
        now: u64,
        rule: &WindowRule,
    ) -> Result<(), StoreError>;

    /// Takes one of `max` in-flight permits of `key`; `false` if all are taken.
    fn concurrency_acquire(&self, key: u64, max: u64) -> Result<bool, StoreError>;

    /// Returns a permit of `key`.
    fn concurrency_release(&self, key: u64);

    /// Takes one of `limit` non-critical fleet slots; `false` if all are taken.
    fn fleet_acquire(&self, limit: u64) -> Result<bool, StoreError>;

    /// Returns a fleet slot.
    fn fleet_release(&self);

    /// Drops state that carries no information at `now` µs (full buckets; keys with nothing
    /// in flight) and at `unix_now` µs since the epoch (expired quota windows).
    fn evict_idle(&self, now: u64, unix_now: u64, quota_rules: &[WindowRule]);

    /// Keys tracked by the request-rate limiter (bucket and quotas) and by the concurrency
    /// limiter.
    fn tracked_keys(&self) -> (usize, usize);
}
