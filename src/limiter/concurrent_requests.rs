//! The concurrent-requests limiter: at most `max_in_flight` requests per key in progress. The
//! permit is an RAII guard, released when the response body ends, fails or is dropped.

use super::{LimiterName, Rejection};
use crate::config::ConcurrentRequestsConfig;
use crate::store::{Store, StoreError};
use crate::tier::Tier;

/// One of a key's in-flight permits; returned on drop, or handed over with [`Self::keep`] to
/// the guard that outlives the decision.
pub struct ConcurrencyPermit<'a> {
    store: &'a dyn Store,
    key: u64,
}

impl ConcurrencyPermit<'_> {
    /// Gives up the duty to return the permit; the caller now owns it for `key`.
    pub fn keep(self) -> u64 {
        let key = self.key;
        std::mem::forget(self);
        key
    }
}

impl std::fmt::Debug for ConcurrencyPermit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyPermit")
            .field("key", &self.key)
            .finish()
    }
}

impl Drop for ConcurrencyPermit<'_> {
    fn drop(&mut self) {
        self.store.concurrency_release(self.key);
    }
}

/// Takes a permit for `key`, or says when to retry.
pub fn acquire<'a>(
    c: &ConcurrentRequestsConfig,
    store: &'a dyn Store,
    key: u64,
    tier: Tier,
) -> Result<Result<ConcurrencyPermit<'a>, Rejection>, StoreError> {
    if store.concurrency_acquire(key, u64::from(c.max_in_flight))? {
        return Ok(Ok(ConcurrencyPermit { store, key }));
    }
    Ok(Err(Rejection {
        limiter: LimiterName::ConcurrentRequests,
        tier,
        status: 429,
        retry_after: c.retry_after.get(),
        policy: None,
    }))
}
