//! The process's own guards alone: where no per-key limiter is on (the defaults:
//! worker_utilization and adaptive_concurrency), a request asks the keyed store nothing and is
//! decided by the chain's last two steps ([`guard_steps`]) under a panic guard of its own.
//! The general chain's guard returns the whole verdict (about 200 bytes: every permit, the
//! RateLimit reading), which cost every decision a copy of it and the steps of three limiters
//! that are off; this one returns the outcome and the fast guard's slot. `tests/middleware.rs`
//! compares its decisions with the general chain's.

use super::evaluate::{guarded, Evaluation};
use super::{EngineRef, RequestModes, Settings};
use crate::config::{LimitersConfig, Mode};
use crate::control::TierShed;
use crate::limiter::adaptive_concurrency::{self, AdaptivePermit, Place, Wait};
use crate::limiter::{worker_utilization, LimiterName, Rejection, Request};
use crate::metrics::Outcome;
use crate::rng::SplitMix64;
use std::ops::ControlFlow;
use std::time::Duration;

/// Whether every limiter that is on is one whose step is in [`guard_steps`], which
/// [`decide`] runs: then no per-key limiter is on. (Whether a limiter keeps per-key state is
/// not the test: a limiter whose step is only in the chain's `run` must answer `false`.)
pub(crate) fn guards_alone(limiters: &LimitersConfig) -> bool {
    LimiterName::ALL.iter().all(|&limiter| match limiter {
        // The chain's last two steps, which `decide` runs.
        LimiterName::WorkerUtilization | LimiterName::AdaptiveConcurrency => true,
        // They ask the keyed store: only the general chain decides them. (A limiter whose
        // step is not in `guard_steps` belongs here, per-key state or not.)
        LimiterName::RequestRate | LimiterName::ConcurrentRequests | LimiterName::FleetUsage => {
            limiter.mode(limiters) == Mode::Off
        }
    })
}

/// The decision on `req` at `now` where the guards are alone (`may_wait`: see
/// `chain::run_chain`), under each one's mode for the request, failing open on a panic as the
/// chain does: the request's outcome and the fast guard's slot or place, or its refusal
/// (`judge` builds the verdict).
#[inline]
pub(super) fn decide<'a, P: EngineRef>(
    owner: &'a P,
    settings: &Settings,
    req: &Request<'_>,
    (now, rng, may_wait): (Duration, &mut SplitMix64, bool),
) -> Result<(Outcome, Guarded<'a>), Rejection> {
    let open = || Ok((Outcome::FailedOpen, (None, None)));
    guarded(owner.engine(), open, |running| {
        let mut outcome = Outcome::Allowed;
        let mut eval = Evaluation::new(owner, req.tier, &mut outcome, running);
        let modes = settings.modes_for(req);
        let shed = owner.engine().plan.tier(req.tier);
        let request = (req, now, may_wait);
        match guard_steps(owner, &mut eval, (settings, &modes), request, (shed, rng)) {
            ControlFlow::Continue(guarded) => Ok((outcome, guarded)),
            ControlFlow::Break(rejection) => Err(rejection),
        }
    })
}

/// What the fast guard gave a request: its slot, or its place in the waiting room (neither
/// when it is off, dark or failed open).
pub(super) type Guarded<'a> = (Option<AdaptivePermit<'a>>, Option<Wait>);

/// The chain's last two steps, the process's own guards, which ask the keyed store nothing:
/// the controller's shed plan (`shed`: what it says of the request's tier), then the fast
/// guard's slot. The two loops share one plan, the controller shedding by tier what lasting
/// overload asks, the fast guard trimming what it lets through: a request the plan sheds
/// takes no slot and holds no tier off, and gets the controller's answer. (Always inlined: the
/// chain and the guards' own decision, [`decide`], each run it once.)
#[inline(always)]
pub(super) fn guard_steps<'a, P: EngineRef>(
    owner: &'a P,
    eval: &mut Evaluation<'_, P>,
    (settings, modes): (&Settings, &RequestModes<'_>),
    (req, now, may_wait): (&Request<'_>, Duration, bool),
    (shed, rng): (TierShed, &mut SplitMix64),
) -> ControlFlow<Rejection, Guarded<'a>> {
    let limiters = &settings.limiters;
    let wu = &limiters.worker_utilization;
    let checked = eval.evaluate(
        LimiterName::WorkerUtilization,
        modes.of(LimiterName::WorkerUtilization),
        || worker_utilization::check(wu, shed, req.tier, req.key, now, rng),
    );
    if let ControlFlow::Break((rejection, ())) = checked {
        return ControlFlow::Break(rejection);
    }
    let ac = &limiters.adaptive_concurrency;
    // Only an enforced limit makes a request wait (a dark one never delays traffic).
    let ac_mode = modes.of(LimiterName::AdaptiveConcurrency);
    let may_wait = may_wait && ac_mode == Mode::Enforce;
    match eval.evaluate(LimiterName::AdaptiveConcurrency, ac_mode, || {
        let state = &owner.engine().adaptive;
        adaptive_concurrency::acquire(ac, state, (req.tier, req.key), now, may_wait)
    }) {
        ControlFlow::Continue(Some(Place::Held(permit))) => {
            ControlFlow::Continue((Some(permit), None))
        }
        ControlFlow::Continue(Some(Place::Waiting(wait))) => {
            ControlFlow::Continue((None, Some(wait)))
        }
        ControlFlow::Continue(None) => ControlFlow::Continue((None, None)),
        ControlFlow::Break((rejection, ())) => ControlFlow::Break(rejection),
    }
}

#[cfg(test)]
#[path = "guards_tests.rs"]
mod tests;
