//! What a request asks of the keyed store (the plan of [`crate::engine`]'s first step): its
//! buckets, its quotas, its permit and a fleet slot, each with whether its limiter is
//! enforced. Plain data of a fixed size (no allocation): every store answers it
//! ([`super::Answer`]), the in-memory one at once, Redis in one round trip.

use super::Table;
use crate::math::window::WindowRule;
use arrayvec::ArrayVec;

/// Most buckets one request is charged in: the per-IP ceiling and its client's own.
pub const MAX_BUCKETS: usize = 2;

/// Most quotas one request is checked against (`limiters.request_rate.quotas` lists at most
/// this many).
pub const MAX_QUOTAS: usize = 16;

/// A bucket to charge: the per-IP ceiling or the client's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketAsk {
    /// Its table.
    pub table: Table,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaAsk {
    /// Its table (one per quota).
    pub table: Table,
    /// Its index in `request_rate.quotas`.
    pub index: usize,
    /// The key hash (client or IP).
    pub key: u64,
    /// Its window.
    pub rule: WindowRule,
    /// Whether a request that fits is counted (request quotas; failure quotas only check).
    pub count: bool,
}

/// A slot to take: one of `max` of `key` in `table` (a client's permit; the fleet's pool,
/// whose key is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotsAsk {
    /// Its table.
    pub table: Table,
    /// The key hash (0 in a pool).
    pub key: u64,
    /// Most taken at once.
    pub max: u64,
}

/// What one request asks of the keyed store, in the order the limiters decide: its client's
/// buckets and quotas (request_rate), its permit (concurrent_requests) and a fleet slot
/// (fleet_usage). An enforced refusal stops the answer there with nothing kept; a refusal in
/// dark mode keeps nothing for that limiter and goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAsk {
    /// The buckets, the per-IP ceiling first.
    pub buckets: ArrayVec<BucketAsk, MAX_BUCKETS>,
    /// The quotas that apply, in config order.
    pub quotas: ArrayVec<QuotaAsk, MAX_QUOTAS>,
    /// The request_rate plan the client's bucket is of (index in the compiled rules), and
    /// whether it is the elastic bucket: what a refusal's wait is measured against.
    pub plan: u16,
    /// See `plan`.
    pub elastic: bool,
    /// The concurrency permit to take.
    pub in_flight: Option<SlotsAsk>,
    /// request_rate is enforced (a refusal stops the request; in dark mode it goes on).
    pub rate_enforced: bool,
    /// concurrent_requests is enforced.
    pub in_flight_enforced: bool,
    /// The fleet slot to take (non-critical requests).
    pub fleet: Option<SlotsAsk>,
    /// fleet_usage is enforced.
    pub fleet_enforced: bool,
}

impl Default for ClientAsk {
    /// Nothing asked. (Written field by field: the lists' room is left as it is, not copied.)
    #[inline]
    fn default() -> Self {
        Self {
            buckets: ArrayVec::new_const(),
            quotas: ArrayVec::new_const(),
            plan: 0,
            elastic: false,
            in_flight: None,
            rate_enforced: false,
            in_flight_enforced: false,
            fleet: None,
            fleet_enforced: false,
        }
    }
}

impl ClientAsk {
    /// Whether there is anything to ask.
    pub fn is_empty(&self) -> bool {
        !self.asks_rate() && self.in_flight.is_none() && self.fleet.is_none()
    }

    /// Whether request_rate asks anything (a bucket or a quota).
    pub fn asks_rate(&self) -> bool {
        !self.buckets.is_empty() || !self.quotas.is_empty()
    }
}
