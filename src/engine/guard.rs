//! The guard an admitted request holds until its response is done: its place in the in-flight
//! count and its limiter permits, all released when it is dropped.

use super::{Admission, Engine};
use crate::limiter::concurrent_requests::ConcurrencyPermit;
use crate::limiter::fleet_usage::FleetPermit;
use crate::tier::Tier;
use std::sync::Arc;

/// Everything an admitted request holds until its response is done: its place in the
/// in-flight count and its limiter permits, all released on drop. One `Arc` keeps them alive.
pub struct RequestGuard {
    shared: Arc<Engine>,
    tier: Tier,
    concurrency: Option<u64>,
    fleet: bool,
}

impl std::fmt::Debug for RequestGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestGuard")
            .field("tier", &self.tier)
            .field("concurrency", &self.concurrency.is_some())
            .field("fleet", &self.fleet)
            .finish()
    }
}

impl RequestGuard {
    /// Enters the in-flight count of `tier` and takes over the admission's permits.
    pub(crate) fn admit(shared: &Arc<Engine>, tier: Tier, admission: Admission<'_>) -> Self {
        shared.in_flight.enter(tier);
        Self {
            shared: shared.clone(),
            tier,
            concurrency: admission.concurrency.map(ConcurrencyPermit::keep),
            fleet: admission.fleet.map(FleetPermit::keep).is_some(),
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.shared.in_flight.leave(self.tier);
        if let Some(key) = self.concurrency {
            self.shared.store.concurrency_release(key);
        }
        if self.fleet {
            self.shared.store.fleet_release();
        }
    }
}
