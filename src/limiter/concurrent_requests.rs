//! The concurrent-requests limiter: at most `max_in_flight` requests per key in progress. The
//! permit owns its return: it goes back when it is dropped (the response body ended, failed or
//! was dropped because the client went away, or a later limiter refused the request).

use super::{Check, Checked, LimiterName, RejectStatus, Rejection};
use crate::config::ConcurrentRequestsConfig;
use crate::store::StoreHandle;
use crate::tier::Tier;

/// One of a key's in-flight permits, returned to the store when dropped.
pub struct ConcurrencyPermit<S: StoreHandle> {
    owner: S,
    key: u64,
}

impl<S: StoreHandle> std::fmt::Debug for ConcurrencyPermit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyPermit")
            .field("key", &self.key)
            .finish()
    }
}

impl<S: StoreHandle> Drop for ConcurrencyPermit<S> {
    fn drop(&mut self) {
        self.owner.store().concurrency_release(self.key);
    }
}

/// Takes a permit for `key` from `owner`'s store, or says when to retry.
pub fn acquire<S: StoreHandle>(
    c: &ConcurrentRequestsConfig,
    owner: &S,
    key: u64,
    tier: Tier,
) -> Checked<ConcurrencyPermit<S>> {
    if owner
        .store()
        .concurrency_acquire(key, u64::from(c.max_in_flight))?
    {
        return Ok(Check::Allowed(ConcurrencyPermit {
            owner: owner.clone(),
            key,
        }));
    }
    let rejection = Rejection {
        limiter: LimiterName::ConcurrentRequests,
        tier,
        status: RejectStatus::TooManyRequests,
        retry_after: c.retry_after.get(),
        policy: None,
    };
    Ok(Check::Rejected(rejection, ()))
}
