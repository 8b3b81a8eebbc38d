//! What a request asks of a store that answers the per-key limiters in one step (fleet mode):
//! planned here, from the settings and the request, under the modes the chain decides under
//! ([`Settings::modes_for`]); the store answers and the chain ([`super::chain`]) decides on the
//! answer as on any store's.

use super::{elastic, Settings};
use crate::config::Mode;
use crate::limiter::{LimiterName, Request};
use crate::store::ClientAsk;

/// What the shared store is asked for `req`, or `None` when the limiters it serves have
/// nothing to ask (kill switch, all off, a critical request with only fleet_usage on).
pub(crate) fn asks(
    settings: &Settings,
    req: &Request<'_>,
    plan: &crate::control::ShedPlan,
) -> Option<ClientAsk> {
    let modes = settings.modes_for(req);
    let mode = |limiter: LimiterName| modes.of(limiter);
    let l = &settings.limiters;
    let mut client = ClientAsk::default();
    let rate = mode(LimiterName::RequestRate);
    if rate != Mode::Off {
        settings
            .rules
            .ask(req, elastic(settings, plan), &mut client);
        client.rate_enforced = rate == Mode::Enforce;
    }
    let in_flight = mode(LimiterName::ConcurrentRequests);
    if in_flight != Mode::Off {
        let max = l.concurrent_requests.max_in_flight;
        client.in_flight = Some((req.key, u64::from(max)));
        client.in_flight_enforced = in_flight == Mode::Enforce;
    }
    let fleet = mode(LimiterName::FleetUsage);
    if fleet != Mode::Off {
        client.fleet = Some(l.fleet_usage.non_critical_limit());
        client.fleet_enforced = fleet == Mode::Enforce;
    }
    (!client.is_empty()).then_some(client)
}
