//! The concurrent-requests limiter: at most `max_in_flight` requests per key in progress. The
//! permit is an RAII guard, released when the response body ends, fails or is dropped.

use super::{LimiterName, Rejection};
use crate::config::ConcurrentRequestsConfig;
use crate::store::{Store, StoreError};
use crate::tier::Tier;
use std::sync::Arc;

/// One of a key's in-flight permits; returned on drop.
pub struct ConcurrencyPermit {
    store: Arc<dyn Store>,
    key: u64,
}

impl std::fmt::Debug for ConcurrencyPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyPermit")
            .field("key", &self.key)
            .finish()
    }
}

impl Drop for ConcurrencyPermit {
    fn drop(&mut self) {
        self.store.concurrency_release(self.key);
    }
}

/// Takes a permit for `key`, or says when to retry.
pub fn acquire(
    c: &ConcurrentRequestsConfig,
    store: &Arc<dyn Store>,
    key: u64,
    tier: Tier,
) -> Result<Result<ConcurrencyPermit, Rejection>, StoreError> {
    Ok(
        if store.concurrency_acquire(key, u64::from(c.max_in_flight))? {
            Ok(ConcurrencyPermit {
                store: store.clone(),
                key,
            })
        } else {
            Err(Rejection {
                limiter: LimiterName::ConcurrentRequests,
                tier,
                status: 429,
                retry_after: c.retry_after.get(),
                quota: None,
            })
        },
    )
}
