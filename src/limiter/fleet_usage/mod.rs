//! The fleet-usage load shedder: `reserved_for_critical` of `capacity` is kept for critical
//! requests. Non-critical requests in flight may use at most `(1 - reserved) × capacity`
//! slots; critical requests are never counted or refused here, so they can use everything.

mod settings;

pub use settings::FleetUsageConfig;

use super::Problem;
use super::{Check, Checked, LimiterName, RejectStatus, Rejection};
use crate::store::StoreHandle;
use crate::tier::Tier;

/// A non-critical request's fleet slot, returned to the store when dropped, unless
/// [`keep`](Self::keep) handed it over to the request's guard first.
pub struct FleetPermit<'a, S: StoreHandle> {
    /// Whose store gets the slot back; `None` once it is handed over.
    owner: Option<&'a S>,
}

impl<S: StoreHandle> std::fmt::Debug for FleetPermit<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetPermit")
    }
}

impl<S: StoreHandle> FleetPermit<'_, S> {
    /// Hands the slot over to its keeper, which must give it back (`Store::fleet_release`)
    /// when the request is done: the request's guard does.
    pub fn keep(mut self) {
        self.owner = None;
    }
}

impl<S: StoreHandle> Drop for FleetPermit<'_, S> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner {
            owner.store().fleet_release();
        }
    }
}

/// Takes a slot for a non-critical request (`None` for a critical one), or says when to retry.
pub fn acquire<'a, S: StoreHandle>(
    c: &FleetUsageConfig,
    owner: &'a S,
    tier: Tier,
) -> Checked<Option<FleetPermit<'a, S>>> {
    if tier == Tier::Critical {
        return Ok(Check::Allowed(None));
    }
    if owner.store().fleet_acquire(c.non_critical_limit())? {
        return Ok(Check::Allowed(Some(FleetPermit { owner: Some(owner) })));
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

/// fleet_usage as a [`Limiter`](super::Limiter): its settings are its unit.
impl super::Limiter for FleetUsageConfig {
    const NAME: LimiterName = LimiterName::FleetUsage;

    fn problem(r: &Rejection, _policy: Option<&str>, wait: &str) -> Problem {
        (
            "Capacity reserved",
            format!(
                "The remaining capacity is reserved for critical requests. Retry this {} request in {wait}.",
                r.tier
            ),
        )
    }
}
