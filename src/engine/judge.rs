//! The decision on one request: the limiter chain, or request_rate alone or the guards alone
//! where they are the only limiters on, timed for one decision in [`TIMED_ONE_IN`] and
//! counted by its outcome.

use super::{alone, guards, run_chain, Admission, Decider, Engine, EngineRef, Settings, Verdict};
use crate::limiter::Request;
use crate::metrics::Outcome;
use crate::rng::SplitMix64;
use std::time::Duration;

/// One decision in this many is timed for `brownout_decision_duration_seconds`: a second clock
/// reading on every request would be a large share of a worker_utilization-only decision
/// (docs/benchmarks.md has what a decision costs).
pub(crate) const TIMED_ONE_IN: u32 = 16;

thread_local! {
    /// Decisions made on this thread, modulo [`TIMED_ONE_IN`].
    static DECISIONS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether this thread's next decision is one of the timed ones (its first one is).
#[inline]
fn timed() -> bool {
    DECISIONS.with(|n| {
        let i = n.get();
        n.set((i + 1) % TIMED_ONE_IN);
        i == 0
    })
}

/// Records how long a decision begun at `started` took, for one decision in
/// [`TIMED_ONE_IN`] on each thread.
#[inline]
fn decision_time(engine: &Engine, started: Duration) {
    if timed() {
        engine
            .metrics
            .decision_time(engine.clock.now().saturating_sub(started));
    }
}

/// Decides a classified request (the general chain, or request_rate or the guards alone, as
/// `Settings::decider` says) and counts the outcome: the decision of every front door and
/// `Brownout::check`. `owner` is the handle the permits keep;
/// `may_wait` and `answered`: see [`run_chain`] (a request that waits is counted once its wait
/// is over).
pub(crate) fn judge<'a: 'k, 'k, P: EngineRef>(
    owner: &'a P,
    settings: &Settings,
    request: &Request<'_>,
    (rng, may_wait): (&mut SplitMix64, bool),
    answered: Option<(&crate::store::Ask, &mut crate::store::Answer<'k>)>,
) -> Verdict<'a, P> {
    let engine = owner.engine();
    let started = engine.clock.now();
    // request_rate alone, or the guards alone: decided under a guard of their own, around an
    // answer much smaller than the verdict, which is built here, where it is returned (not
    // copied on its way out).
    if answered.is_none() {
        match settings.decider {
            Decider::RateAlone => {
                let decided = alone::decide(owner, settings, request, started);
                decision_time(engine, started);
                let outcome = decided.unwrap_or(Outcome::Rejected);
                engine.metrics.request(request.tier, outcome);
                return match decided {
                    Ok(outcome) => Verdict::Allow(Admission::new(outcome)),
                    Err(rejection) => Verdict::Reject(rejection, None),
                };
            }
            Decider::Guards => {
                let decided = guards::decide(owner, settings, request, (started, rng, may_wait));
                decision_time(engine, started);
                return match decided {
                    Ok((outcome, guarded)) => {
                        // A request that waits is counted once its wait is over.
                        if guarded.1.is_none() {
                            engine.metrics.request(request.tier, outcome);
                        }
                        // Built where it is returned: not copied on its way out.
                        Verdict::Allow(Admission::guarded(outcome, guarded))
                    }
                    Err(rejection) => {
                        engine.metrics.request(request.tier, Outcome::Rejected);
                        Verdict::Reject(rejection, None)
                    }
                };
            }
            Decider::Chain => {}
        }
    }
    let verdict = run_chain(owner, settings, request, (started, rng, may_wait), answered);
    decision_time(engine, started);
    let outcome = match &verdict {
        Verdict::Reject(..) => Outcome::Rejected,
        // Counted once its wait is over.
        Verdict::Pace(_) => return verdict,
        Verdict::Allow(admission) if admission.queued.is_some() => return verdict,
        Verdict::Allow(admission) => admission.outcome,
    };
    engine.metrics.request(request.tier, outcome);
    verdict
}
