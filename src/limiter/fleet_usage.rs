//! The fleet-usage load shedder: `reserved_for_critical` of `capacity` is kept for critical
//! requests. Non-critical requests in flight may use at most `(1 - reserved) × capacity`
//! slots; critical requests are never counted or refused here, so they can use everything.

use super::{LimiterName, Rejection};
use crate::config::FleetUsageConfig;
use crate::store::{Store, StoreError};
use crate::tier::Tier;

/// A non-critical request's fleet slot; returned on drop, or handed over with [`Self::keep`]
/// to the guard that outlives the decision.
pub struct FleetPermit<'a> {
    store: &'a dyn Store,
}

impl FleetPermit<'_> {
    /// Gives up the duty to return the slot; the caller now owns it.
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

impl std::fmt::Debug for FleetPermit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetPermit")
    }
}

impl Drop for FleetPermit<'_> {
    fn drop(&mut self) {
        self.store.fleet_release();
    }
}

/// Takes a slot for a non-critical request (`None` for a critical one), or says when to retry.
pub fn acquire<'a>(
    c: &FleetUsageConfig,
    store: &'a dyn Store,
    tier: Tier,
) -> Result<Result<Option<FleetPermit<'a>>, Rejection>, StoreError> {
    if tier == Tier::Critical {
        return Ok(Ok(None));
    }
    Ok(if store.fleet_acquire(c.non_critical_limit())? {
        Ok(Some(FleetPermit { store }))
    } else {
        Err(Rejection {
            limiter: LimiterName::FleetUsage,
            tier,
            status: 503,
            retry_after: c.retry_after.get(),
            policy: None,
        })
    })
}
