//! The concurrent-requests limiter: at most `max_in_flight` requests per key in progress. The
//! permit owns its return: it goes back when it is dropped (a later limiter refused the
//! request), or, once the request is admitted, when the request's guard that kept it is
//! dropped (the response body ended, failed or was dropped because the client went away).

mod settings;

pub use settings::ConcurrentRequestsConfig;

use super::Problem;
use super::{Check, Checked, LimiterName, RejectStatus, Rejection};
use crate::store::StoreHandle;
use crate::tier::Tier;

/// One of a key's in-flight permits, returned to the store when dropped, unless
/// [`keep`](Self::keep) handed it over to the request's guard first.
pub struct ConcurrencyPermit<'a, S: StoreHandle> {
    /// Whose store gets the permit back; `None` once it is handed over.
    owner: Option<&'a S>,
    key: u64,
}

impl<S: StoreHandle> std::fmt::Debug for ConcurrencyPermit<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyPermit")
            .field("key", &self.key)
            .finish()
    }
}

impl<S: StoreHandle> ConcurrencyPermit<'_, S> {
    /// Hands the permit over to whoever keeps the returned key: it must give the permit back
    /// (`Store::concurrency_release`) when its request is done. The request's guard does, so
    /// that a permit needs no handle of its own on the store while the request runs.
    pub fn keep(mut self) -> u64 {
        self.owner = None;
        self.key
    }
}

impl<S: StoreHandle> Drop for ConcurrencyPermit<'_, S> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner {
            owner.store().concurrency_release(self.key);
        }
    }
}

/// Takes a permit for `key` from `owner`'s store, or says when to retry.
pub fn acquire<'a, S: StoreHandle>(
    c: &ConcurrentRequestsConfig,
    owner: &'a S,
    key: u64,
    tier: Tier,
) -> Checked<ConcurrencyPermit<'a, S>> {
    if owner
        .store()
        .concurrency_acquire(key, u64::from(c.max_in_flight))?
    {
        return Ok(Check::Allowed(ConcurrencyPermit {
            owner: Some(owner),
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

/// concurrent_requests as a [`Limiter`](super::Limiter): its settings are its unit.
impl super::Limiter for ConcurrentRequestsConfig {
    const NAME: LimiterName = LimiterName::ConcurrentRequests;

    fn problem(_r: &Rejection, _policy: Option<&str>, wait: &str) -> Problem {
        (
            "Too many concurrent requests",
            format!(
                "You have too many requests in progress. Retry in {wait}, once some have finished."
            ),
        )
    }
}
