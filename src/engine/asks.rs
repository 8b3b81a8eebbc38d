//! The first of the three steps a request's per-key limiters go through (ask, answer,
//! decide; docs/ARCHITECTURE.md): what the request asks of the keyed store, written from the
//! settings and the request under the modes the chain decides under
//! ([`Settings::modes_for`]). Every store answers the same ask, and the chain
//! ([`super::chain`]) decides on the answer the same way.

use super::{RequestModes, Settings};
use crate::config::Mode;
use crate::limiter::{concurrent_requests, fleet_usage};
use crate::limiter::{LimiterName, Request};
use crate::store::Ask;

/// Fills `ask` with what the keyed store is asked for `req` under `modes` (`elastic`: the
/// server has room to spare), each per-key limiter that is on planning its own group in the
/// chain's order; `false` when they have nothing to ask (kill switch, all off, a critical
/// request with only fleet_usage on).
#[inline]
pub(crate) fn add_to_ask(
    settings: &Settings,
    req: &Request<'_>,
    modes: &RequestModes<'_>,
    elastic: bool,
    ask: &mut Ask,
) -> bool {
    let mode = |limiter: LimiterName| modes.of(limiter);
    let l = &settings.limiters;
    let rate = mode(LimiterName::RequestRate);
    if rate != Mode::Off {
        settings
            .rules
            .add_to_ask(req, elastic, rate == Mode::Enforce, ask);
    }
    let in_flight = mode(LimiterName::ConcurrentRequests);
    if in_flight != Mode::Off {
        let enforced = in_flight == Mode::Enforce;
        concurrent_requests::add_to_ask(&l.concurrent_requests, req.key, enforced, ask);
    }
    let fleet = mode(LimiterName::FleetUsage);
    if fleet != Mode::Off {
        fleet_usage::add_to_ask(&l.fleet_usage, fleet == Mode::Enforce, ask);
    }
    !ask.is_empty()
}

/// Whether request_rate uses the elastic bucket: the server has room to spare.
pub(crate) fn elastic(settings: &Settings, plan: &crate::control::ShedPlan) -> bool {
    plan.samples > 0 && plan.utilization < settings.limiters.worker_utilization.end_of_good
}

/// What the keyed store is asked for `req` under the live `plan`, or `None` when there is
/// nothing to ask: what a store that answers later (fleet mode's Redis) is sent.
#[cfg(feature = "redis")]
pub(crate) fn asks(
    settings: &Settings,
    req: &Request<'_>,
    plan: &crate::control::ShedPlan,
) -> Option<Ask> {
    let mut ask = Ask::default();
    let elastic = elastic(settings, plan);
    add_to_ask(settings, req, &settings.modes_for(req), elastic, &mut ask).then_some(ask)
}

#[cfg(test)]
#[path = "asks_room_tests.rs"]
mod room_tests;

#[cfg(all(test, feature = "redis"))]
#[path = "asks_tests.rs"]
mod tests;
