//! The limiter chain: each limiter in DESIGN.md order, under its mode, failing open on any
//! error or panic.

use super::{worker_utilization, LimiterError, LimiterName, Rejection};
use crate::classify::Classified;
use crate::config::Mode;
use crate::metrics::Outcome;
use crate::rng::SplitMix64;
use crate::runtime::{Settings, Shared};
use crate::tier::Tier;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

/// The chain's answer for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Verdict {
    /// Let it through; the outcome says whether anything was noticed on the way.
    Allow(Outcome),
    /// Answer with this rejection.
    Reject(Rejection),
}

/// Runs every limiter over one request.
pub(crate) fn decide(
    shared: &Shared,
    settings: &Settings,
    request: Classified,
    now: Duration,
    rng: &mut SplitMix64,
) -> Verdict {
    if settings.kill_switch {
        return Verdict::Allow(Outcome::Allowed);
    }
    let mut outcome = Outcome::Allowed;
    let wu = &settings.limiters.worker_utilization;
    let shed = evaluate(
        shared,
        LimiterName::WorkerUtilization,
        wu.mode,
        request.tier,
        &mut outcome,
        || {
            let plan = shared.plan.load();
            worker_utilization::check(wu, &plan, request.tier, request.key, now, rng)
        },
    );
    match shed {
        Some(rejection) => Verdict::Reject(rejection),
        None => Verdict::Allow(outcome),
    }
}

/// Evaluates one limiter under `mode`; only an enforced rejection is returned.
fn evaluate(
    shared: &Shared,
    limiter: LimiterName,
    mode: Mode,
    tier: Tier,
    outcome: &mut Outcome,
    check: impl FnOnce() -> Result<Option<Rejection>, LimiterError>,
) -> Option<Rejection> {
    if mode == Mode::Off {
        return None;
    }
    match catch_unwind(AssertUnwindSafe(check)) {
        Ok(Ok(None)) => None,
        Ok(Ok(Some(rejection))) => {
            let dark = mode == Mode::Dark;
            shared.metrics.rejection(limiter, tier, dark);
            if !dark {
                return Some(rejection);
            }
            // A dark rejection outranks a fail-open in the request's outcome.
            *outcome = Outcome::DarkRejected;
            shared.dark_rejected(limiter.as_str(), tier);
            None
        }
        Ok(Err(error)) => {
            shared.fail_open(limiter.as_str(), error.reason(), || {
                format!("{}: {error}", limiter.as_str())
            });
            note_fail_open(outcome);
            None
        }
        Err(_) => {
            shared.fail_open(limiter.as_str(), "panic", || {
                format!("{} panicked", limiter.as_str())
            });
            note_fail_open(outcome);
            None
        }
    }
}

fn note_fail_open(outcome: &mut Outcome) {
    if *outcome == Outcome::Allowed {
        *outcome = Outcome::FailedOpen;
    }
}
