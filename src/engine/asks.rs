//! The first of the three steps a request's per-key limiters go through (plan, answer,
//! decide; docs/ARCHITECTURE.md): what the request asks of the keyed store, planned from the
//! settings and the request under the modes the chain decides under
//! ([`Settings::modes_for`]). Every store answers the same plan, and the chain
//! ([`super::chain`]) decides on the answer the same way.

use super::{RequestModes, Settings};
use crate::config::Mode;
use crate::limiter::{LimiterName, Request};
use crate::store::{ClientAsk, SlotsAsk};

/// Fills `ask` with what the keyed store is asked for `req` under `modes` (`elastic`: the
/// server has room to spare); `false` when the limiters it serves have nothing to ask (kill
/// switch, all off, a critical request with only fleet_usage on).
#[inline]
pub(crate) fn plan_ask(
    settings: &Settings,
    req: &Request<'_>,
    modes: &RequestModes<'_>,
    elastic: bool,
    ask: &mut ClientAsk,
) -> bool {
    let mode = |limiter: LimiterName| modes.of(limiter);
    let l = &settings.limiters;
    let rate = mode(LimiterName::RequestRate);
    if rate != Mode::Off {
        settings.rules.ask(req, elastic, ask);
        ask.rate_enforced = rate == Mode::Enforce;
    }
    let in_flight = mode(LimiterName::ConcurrentRequests);
    if in_flight != Mode::Off {
        let max = l.concurrent_requests.max_in_flight;
        ask.in_flight = Some(SlotsAsk {
            table: crate::limiter::concurrent_requests::PERMITS,
            key: req.key,
            max: u64::from(max),
        });
        ask.in_flight_enforced = in_flight == Mode::Enforce;
    }
    let fleet = mode(LimiterName::FleetUsage);
    if fleet != Mode::Off {
        ask.fleet = Some(SlotsAsk {
            table: crate::limiter::fleet_usage::SLOTS,
            key: 0,
            max: l.fleet_usage.non_critical_limit(),
        });
        ask.fleet_enforced = fleet == Mode::Enforce;
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
) -> Option<ClientAsk> {
    let mut ask = ClientAsk::default();
    let elastic = elastic(settings, plan);
    plan_ask(settings, req, &settings.modes_for(req), elastic, &mut ask).then_some(ask)
}
