//! What a request asks of a store that answers the per-key limiters in one step (fleet mode):
//! planned here, from the settings and the request, with each limiter's mode; the store answers
//! and the chain ([`super::chain`]) decides on the answer as on any store's.

use super::{elastic, Settings};
use crate::config::Mode;
use crate::limiter::Request;
use crate::store::ClientAsk;
use crate::tier::Tier;

/// What the shared store is asked for `req`, or `None` when the limiters it serves have
/// nothing to ask (kill switch, all off, a critical request with only fleet_usage on).
pub(crate) fn asks(
    settings: &Settings,
    req: &Request<'_>,
    plan: &crate::control::ShedPlan,
) -> Option<ClientAsk> {
    if settings.kill_switch {
        return None;
    }
    let l = &settings.limiters;
    let mut client = ClientAsk::default();
    // A CORS preflight spends no client's quota (Request::per_client).
    let per_client = req.per_client(settings.classifier.charge_preflights);
    if per_client && l.request_rate.mode != Mode::Off {
        settings
            .rules
            .ask(req, elastic(settings, plan), &mut client);
        client.rate_enforced = l.request_rate.mode == Mode::Enforce;
    }
    let cr = &l.concurrent_requests;
    if per_client && cr.mode != Mode::Off {
        client.in_flight = Some((req.key, u64::from(cr.max_in_flight)));
        client.in_flight_enforced = cr.mode == Mode::Enforce;
    }
    let fu = &l.fleet_usage;
    if fu.mode != Mode::Off && req.tier != Tier::Critical {
        client.fleet = Some(fu.non_critical_limit());
        client.fleet_enforced = fu.mode == Mode::Enforce;
    }
    (!client.is_empty()).then_some(client)
}
