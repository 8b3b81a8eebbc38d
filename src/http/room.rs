//! What both front doors do around the engine's decision: wait for adaptive_concurrency's
//! room, and count failure quotas once the app has answered.

use crate::engine::{Engine, EngineRef, Queued, RequestHold};
use crate::limiter::adaptive_concurrency::micros;
use crate::limiter::request_rate::{FailureTicket, RateStatus};
use crate::limiter::{LimiterName, Rejection};
use crate::metrics::Outcome;
use crate::store::Held;
use crate::tier::Tier;

/// Waits, for at most `max_wait` (`post_max_wait` for a POST), for adaptive_concurrency's
/// room, with a [last look](crate::limiter::adaptive_concurrency::Wait::last_look) when the
/// wait runs out: the hold of a request let in, counted with its `outcome`; or the refusal of
/// one not let in (timed out, or turned away for a higher tier), refused as if at once
/// (counted, its hold's permits and its request_rate credits given back), with the RateLimit
/// status of the credits given back. The middleware and the tower layer both wait here.
pub(crate) async fn wait_for_room<P: EngineRef>(
    engine: &Engine,
    (tier, outcome): (Tier, Outcome),
    mut hold: RequestHold<P>,
    queued: Box<Queued>,
) -> Result<RequestHold<P>, (Rejection, Option<RateStatus>)> {
    let max_wait = engine
        .settings()
        .load()
        .limiters
        .adaptive_concurrency
        .max_wait_for(tier);
    let Queued {
        wait,
        refund,
        held,
        at,
        refunded,
    } = *queued;
    let mut wait = wait;
    let admitted = match tokio::time::timeout(max_wait, &mut wait).await {
        Ok(granted) => granted.ok(),
        // Its wait ran out: one last look for room under the whole limit.
        Err(_) => wait.last_look(engine.clock().now()),
    };
    if let Some(admitted_at) = admitted {
        hold.granted(admitted_at);
        engine.metrics().request(tier, outcome);
        return Ok(hold);
    }
    // The wait leaves the room; the hold gives the other limiters' permits back.
    drop(wait);
    drop(hold);
    let settings = engine.settings().load_full();
    let ac = &settings.limiters.adaptive_concurrency;
    let rejection = engine
        .adaptive()
        .refuse(ac, tier, micros(engine.clock().now()));
    engine
        .metrics()
        .rejection(LimiterName::AdaptiveConcurrency, tier, false);
    engine.metrics().request(tier, Outcome::Rejected);
    if let Some(ticket) = refund {
        settings.rules.refund(engine.keyed(), held, &ticket, at);
    }
    Err((rejection, refunded))
}

/// Counts the failure quotas of `ticket` (the request was decided where `held` says) when the
/// app answered with `status`, an error (4xx or 5xx).
pub(crate) fn count_failure(engine: &Engine, held: Held, ticket: &FailureTicket, status: u16) {
    if !(400..600).contains(&status) {
        return;
    }
    let settings = engine.settings().load();
    let keyed = engine.keyed();
    if !keyed.count_failures_shared(held, settings.rules.failure_quotas(ticket)) {
        let at = engine.check_time(engine.clock().now());
        settings
            .rules
            .record_failure(keyed.local(), ticket, at.unix);
    }
}
