//! The fleet-usage load shedder: `reserved_for_critical` of `capacity` is kept for critical
//! requests. Non-critical requests in flight may use at most `(1 - reserved) × capacity`
//! slots; critical requests are never counted or refused here, so they can use everything.

use super::{Check, Checked, LimiterName, RejectStatus, Rejection};
use crate::config::FleetUsageConfig;
use crate::store::StoreHandle;
use crate::tier::Tier;

/// A non-critical request's fleet slot, returned to the store when dropped.
pub struct FleetPermit<S: StoreHandle> {
    owner: S,
}

impl<S: StoreHandle> std::fmt::Debug for FleetPermit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetPermit")
    }
}

impl<S: StoreHandle> Drop for FleetPermit<S> {
    fn drop(&mut self) {
        self.owner.store().fleet_release();
    }
}

/// Takes a slot for a non-critical request (`None` for a critical one), or says when to retry.
pub fn acquire<S: StoreHandle>(
    c: &FleetUsageConfig,
    owner: &S,
    tier: Tier,
) -> Checked<Option<FleetPermit<S>>> {
    if tier == Tier::Critical {
        return Ok(Check::Allowed(None));
    }
    if owner.store().fleet_acquire(c.non_critical_limit())? {
        return Ok(Check::Allowed(Some(FleetPermit {
            owner: owner.clone(),
        })));
    }
    let rejection = Rejection {
        limiter: LimiterName::FleetUsage,
        tier,
        status: RejectStatus::ServiceUnavailable,
        retry_after: c.retry_after.get(),
        policy: None,
    };
    Ok(Check::Rejected(rejection, ()))
}
