//! What a request asks of a store that answers it in one step (fleet mode's Redis), planned by
//! the engine from the settings and the request (`engine::asks`): its buckets, its quotas, its
//! permit and a fleet slot, each with whether its limiter is enforced. Plain data: no store's
//! types in it.

#[cfg(feature = "redis")]
use crate::math::window::WindowRule;

/// A bucket to charge: the per-IP ceiling or the client's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketAsk {
    /// The key hash.
    pub key: u64,
    /// The hash tag it lives under: the client's (its own bucket) or the IP's (the per-IP
    /// ceiling), so that in a Cluster each lives with the rest of that client's or IP's keys.
    pub tag: u64,
    /// µs the request moves the TAT.
    pub increment: u64,
    /// µs the TAT may run ahead of now.
    pub tolerance: u64,
}

/// A quota to check (and count the request against, for a request-counting quota).
#[cfg(feature = "redis")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaAsk {
    /// Its index in `request_rate.quotas`.
    pub index: usize,
    /// The key hash (client or IP).
    pub key: u64,
    /// Its window.
    pub rule: WindowRule,
    /// Whether a request that fits is counted (request quotas; failure quotas only check).
    pub count: bool,
}

/// What one request asks of the shared store, in the order the in-memory limiters would ask
/// it: its client's buckets, quotas and permit, and a fleet slot.
#[cfg(feature = "redis")]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientAsk {
    /// The buckets, the per-IP ceiling first.
    pub buckets: Vec<BucketAsk>,
    /// The quotas that apply, in config order.
    pub quotas: Vec<QuotaAsk>,
    /// The concurrency permit to take: (key, most in flight).
    pub in_flight: Option<(u64, u64)>,
    /// request_rate is enforced (a refusal stops the request; in dark mode it goes on).
    pub rate_enforced: bool,
    /// concurrent_requests is enforced.
    pub in_flight_enforced: bool,
    /// The fleet slot to take, under this limit (non-critical requests).
    pub fleet: Option<u64>,
    /// fleet_usage is enforced.
    pub fleet_enforced: bool,
}

#[cfg(feature = "redis")]
impl ClientAsk {
    /// Whether there is anything to ask.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
            && self.quotas.is_empty()
            && self.in_flight.is_none()
            && self.fleet.is_none()
    }
}
