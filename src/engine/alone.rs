//! request_rate alone: where it is the only limiter on and asks nothing the general chain
//! leaves to it (`Decider::RateAlone`), a request's bucket (and per-IP ceiling) is charged
//! in the local store at once, with no ask and no answer, under a panic guard of its own. The
//! general chain's guard returns the whole verdict (about 200 bytes: the permits, the
//! RateLimit reading), which cost every decision a copy of it; this one returns the outcome
//! or the refusal. `tests/limiters.rs` compares its decisions with the general chain's.

use super::evaluate::{guarded, Evaluation};
use super::{EngineRef, Settings};
use crate::config::{LimitersConfig, Mode};
use crate::limiter::request_rate::{Excess, RequestRateConfig};
use crate::limiter::{LimiterName, Rejection, Request};
use crate::metrics::Outcome;
use std::ops::ControlFlow;
use std::time::Duration;

/// Whether request_rate is the only limiter on, asking nothing [`decide`] leaves to the
/// general chain (no quota, pacing, elastic bucket or RateLimit fields): `Decider::RateAlone`.
pub(crate) fn rate_alone(limiters: &LimitersConfig) -> bool {
    let alone = LimiterName::ALL.iter().all(|&l| {
        let on = l.mode(limiters) != Mode::Off;
        on == (l == LimiterName::RequestRate)
    });
    // Every option named: a new one must say whether `charge_alone` does what it asks.
    let RequestRateConfig {
        mode: _,
        rate: _,
        burst: _,
        default_cost: _,
        costs: _,
        plans: _,
        soft_overage: _,
        per_ip: _,
        max_keys: _,
        eviction_interval: _,
        max_delay: _,
        elastic_factor,
        headers,
        quotas,
        excess,
    } = &limiters.request_rate;
    alone && quotas.is_empty() && *excess == Excess::Refuse && *elastic_factor == 1.0 && !headers
}

/// The decision on `req` at `now` where request_rate is alone, under its mode for the request
/// (off for a preflight it does not charge, or under the kill switch), failing open on a
/// store error or a panic as the chain does: the request's outcome, or its refusal (`judge`
/// builds the verdict).
#[inline]
pub(super) fn decide<P: EngineRef>(
    owner: &P,
    settings: &Settings,
    req: &Request<'_>,
    now: Duration,
) -> Result<Outcome, Rejection> {
    let open = || Ok(Outcome::FailedOpen);
    guarded(owner.engine(), open, |running| {
        let store = owner.engine().keyed().local();
        let now = now.as_micros() as u64;
        let mut outcome = Outcome::Allowed;
        let mut eval = Evaluation::new(owner, req.tier, &mut outcome, running);
        let mode = settings.modes_for(req).of(LimiterName::RequestRate);
        let check = || Ok(settings.rules.charge_alone(store, req, now)?);
        match eval.evaluate(LimiterName::RequestRate, mode, check) {
            ControlFlow::Continue(_) => Ok(outcome),
            ControlFlow::Break((rejection, ())) => Err(rejection),
        }
    })
}
