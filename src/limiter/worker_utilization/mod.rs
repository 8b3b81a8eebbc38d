//! The worker-utilization check: drop a request of tier t with the published probability p(t).

mod settings;
#[cfg(test)]
#[path = "safety_tests.rs"]
mod safety;

pub use settings::WorkerUtilizationConfig;

use crate::store::AskSize;
use super::Problem;
use super::{Check, LimiterError, LimiterName, RejectStatus, Rejection};
use crate::control::{should_drop, TierShed};
use crate::rng::SplitMix64;
use crate::tier::Tier;
use std::time::Duration;

/// How old a plan may be before it is distrusted: three sample intervals (at least 1 s).
pub fn stale_after(c: &WorkerUtilizationConfig) -> Duration {
    (c.sample_interval.get() * 3).max(Duration::from_secs(1))
}

/// Checks one request of `tier` against what the published plan says of its tier (`shed`).
///
/// A plan that would shed but is stale (the controller died or its source keeps failing) is
/// not trusted: the request fails open rather than being shed forever.
#[inline]
pub fn check(
    c: &WorkerUtilizationConfig,
    shed: TierShed,
    tier: Tier,
    key: u64,
    now: Duration,
    rng: &mut SplitMix64,
) -> Result<Check, LimiterError> {
    if shed.probability <= 0.0 {
        return Ok(Check::Allowed(()));
    }
    check_shed((c, shed), (tier, key, now), rng)
}

/// [`check`] where the plan sheds some of the tier (out of line: only under overload).
#[inline(never)]
fn check_shed(
    (c, shed): (&WorkerUtilizationConfig, TierShed),
    (tier, key, now): (Tier, u64, Duration),
    rng: &mut SplitMix64,
) -> Result<Check, LimiterError> {
    let p = shed.probability;
    let age = now.saturating_sub(Duration::from_nanos(shed.at_nanos));
    if age > stale_after(c) {
        return Err(LimiterError::StalePlan { age });
    }
    if !should_drop(p, c.selection, c.cohort_rotation.get(), key, now, rng) {
        return Ok(Check::Allowed(()));
    }
    let rejection = Rejection {
        limiter: LimiterName::WorkerUtilization,
        tier,
        status: RejectStatus::ServiceUnavailable,
        retry_after: c.retry_after.map_or(c.sample_interval.get(), |r| r.get()),
        policy: None,
    };
    Ok(Check::Rejected(rejection, ()))
}

/// worker_utilization as a [`Limiter`](super::Limiter): its settings are its unit.
impl super::Limiter for WorkerUtilizationConfig {
    fn asks_at_most(&self) -> AskSize {
        // Its plan is this process's own.
        AskSize::default()
    }
    fn restart_only(&self, new: &Self) -> Option<&'static str> {
        // Its sources are built at start.
        (self.source != new.source || self.sources != new.sources)
            .then_some("limiters.worker_utilization.source")
    }
    const NAME: LimiterName = LimiterName::WorkerUtilization;
    // The shed plan is this process's own, not per key.
    const TABLES: u8 = 0;

    fn tables(&self) -> Vec<crate::store::TableSpec> {
        Vec::new()
    }

    fn keep_sized_at_start(&mut self, own: &Self) {
        self.source = own.source;
        self.sources = own.sources.clone();
    }

    fn problem(r: &Rejection, _policy: Option<&str>, wait: &str) -> Problem {
        if r.tier == Tier::Critical {
            return super::critical_refused(wait);
        }
        (
            "Service overloaded",
            format!(
                "The server is shedding {} traffic to stay up under load. Retry in {wait}; critical requests are still being served.",
                r.tier
            ),
        )
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
