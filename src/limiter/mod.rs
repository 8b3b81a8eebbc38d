//! The limiters, checked in the order of the README's "How a request is decided", and the
//! chain that applies their modes and fails open on any error or panic.

pub mod adaptive_concurrency;
pub mod concurrent_requests;
pub mod fleet_usage;
pub mod request_rate;
pub mod worker_utilization;

/// The arithmetic lives in [`crate::math`]; these paths are kept for existing users.
pub use crate::math::{gcra, window};

use crate::tier::Tier;
use serde::Serialize;
use std::time::Duration;

/// The five limiters, in the order of their tables and metrics (the chain checks
/// worker_utilization's plan before adaptive_concurrency).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimiterName {
    /// Per-key token bucket.
    RequestRate = 0,
    /// Per-key in-flight cap.
    ConcurrentRequests = 1,
    /// Capacity reserved for critical traffic.
    FleetUsage = 2,
    /// The fast guard: a learned limit on non-critical requests in flight.
    AdaptiveConcurrency = 3,
    /// The derivative-controller shedder.
    WorkerUtilization = 4,
}

impl LimiterName {
    /// Every limiter, in the order of their tables and metrics.
    pub const ALL: [LimiterName; 5] = [
        LimiterName::RequestRate,
        LimiterName::ConcurrentRequests,
        LimiterName::FleetUsage,
        LimiterName::AdaptiveConcurrency,
        LimiterName::WorkerUtilization,
    ];

    /// The label value and admin API name.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimiterName::RequestRate => "request_rate",
            LimiterName::ConcurrentRequests => "concurrent_requests",
            LimiterName::FleetUsage => "fleet_usage",
            LimiterName::AdaptiveConcurrency => "adaptive_concurrency",
            LimiterName::WorkerUtilization => "worker_utilization",
        }
    }

    /// Looks a limiter up by its name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

/// The request as every limiter sees it: classified once, read by all four.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Its tier.
    pub tier: Tier,
    /// The hash of its client key.
    pub key: u64,
    /// The hash of its client IP (equal to `key` when nothing needs the IP apart).
    pub ip: u64,
    /// HTTP method.
    pub method: &'a str,
    /// The path the router matches on.
    pub path: &'a str,
    /// The request-rate plan named by the app, if any.
    pub plan: Option<&'a str>,
}

impl Request<'_> {
    /// Whether the per-client limiters (request_rate, concurrent_requests) count it. A CORS
    /// preflight (`OPTIONS`), which a browser sends on its own before the app's request,
    /// spends none of the client's quota and holds none of its slots unless
    /// `charge_preflights` (`classifier.charge_preflights`); the limiters that protect the
    /// server (fleet_usage, worker_utilization, adaptive_concurrency) always see it.
    pub fn per_client(&self, charge_preflights: bool) -> bool {
        charge_preflights || self.method != "OPTIONS"
    }
}

/// Every limiter's answer: allowed, holding `H` until the request is done (a permit, what was
/// charged), or rejected, with `R` for the answer (the RateLimit fields' reading).
#[derive(Debug, PartialEq)]
pub enum Check<H = (), R = ()> {
    /// Go on; keep `H` while the request runs (dropping it gives back what it holds).
    Allowed(H),
    /// Stop here.
    Rejected(Rejection, R),
}

impl<H, R> Check<H, R> {
    /// The rejection, if this is one.
    pub fn rejection(&self) -> Option<Rejection> {
        match self {
            Check::Allowed(_) => None,
            Check::Rejected(r, _) => Some(*r),
        }
    }
}

/// A limiter's answer, or why it could not give one (the request then fails open).
pub type Checked<H = (), R = ()> = Result<Check<H, R>, LimiterError>;

/// The status a rejection answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectStatus {
    /// 429: this client is over one of its limits.
    TooManyRequests,
    /// 503: the server is protecting itself.
    ServiceUnavailable,
}

impl RejectStatus {
    /// The HTTP status code.
    pub const fn as_u16(self) -> u16 {
        match self {
            RejectStatus::TooManyRequests => 429,
            RejectStatus::ServiceUnavailable => 503,
        }
    }
}

/// A limiter's "no": an ordinary value that says when to come back.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Rejection {
    /// Who said no.
    pub limiter: LimiterName,
    /// The request's tier.
    pub tier: Tier,
    /// 429 (this user is over a limit) or 503 (the server is protecting itself).
    pub status: RejectStatus,
    /// When a retry may succeed.
    pub retry_after: Duration,
    /// For a request-rate rejection by something other than the client's bucket: the per-IP
    /// ceiling or a quota.
    pub policy: Option<RatePolicy>,
}

/// A request-rate policy other than the client's own bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RatePolicy {
    /// The per-IP ceiling (`request_rate.per_ip`).
    PerIp,
    /// The quota at this index of `request_rate.quotas`.
    Quota(u8),
}

/// Why a limiter could not decide; the request is let through (fail open).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LimiterError {
    /// The controller has not published a plan for too long (it died, or its source fails).
    #[error("the shed plan is {age:?} old")]
    StalePlan {
        /// How old the plan is.
        age: Duration,
    },
    /// The store could not answer.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl LimiterError {
    /// The `reason` label of `brownout_fail_open_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            LimiterError::StalePlan { .. } => "stale_plan",
            LimiterError::Store(e) => e.reason(),
        }
    }
}
