//! The adaptive-concurrency limiter, the fast guard: requests in flight are kept under a limit
//! learned from their latency ([`crate::math::adaptive`]), so a load step or a capacity drop
//! is met within about a second, with no hand-set capacity. Each tier may use its share of the
//! limit (post all of it, get `get_share`, test `test_share`), counting its own requests in
//! flight and those of the tiers above it: a GET or a test request never takes room a POST
//! needs (when the limit shrinks under GETs admitted a moment before, POSTs still find their
//! room). Critical requests are counted and take room from every other tier, never the
//! reverse, so the app holds about the limit's worth of work and a critical request never waits
//! behind more than that (the reserve for critical). They are refused only when critical demand
//! alone is more than the server answers in time: past `critical_ceiling` times the limit in
//! flight. Then a share of critical cohorts is admitted (it falls each window the ceiling is
//! hit, [`crate::math::critical::critical_share`]), so the excess is refused at once and by
//! client, and the clients let in are answered within their deadlines instead of everyone
//! waiting in a queue that outgrows them. Shares order refusals
//! only on average, so a refused request holds every lower tier off for `tier_hold` while at
//! least half a tier's share is in flight (a burst that drained holds nothing off), and no
//! lower-tier request passes one waiting for room ([`Wait`]).

mod permit;
mod room;
mod settings;
mod state;
mod wait;

use crate::store::AskSize;
use state::fits;
pub(crate) use state::micros;
pub use settings::AdaptiveConcurrencyConfig;
pub use permit::AdaptivePermit;
pub use state::AdaptiveState;
pub use wait::{Place, Wait};

use super::{Check, LimiterError};
use super::{LimiterName, Problem, Rejection};
use crate::control::{cohort_epoch, cohort_score};
use crate::math::adaptive::LimitParams;
use crate::tier::Tier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The limit's settings from the config block.
pub fn params(c: &AdaptiveConcurrencyConfig) -> LimitParams {
    LimitParams {
        min: f64::from(c.min_limit),
        max: f64::from(c.max_limit),
        tolerance: c.tolerance,
        floor_window: micros(c.floor_window.get()),
        rest: f64::from(c.initial_limit),
    }
}

/// Takes a slot for a request of client `key` arriving at `now` (a critical one gets one
/// below the ceiling), or a place in the waiting room when `may_wait` (the middleware,
/// enforcing, with a `queue`), or says when to retry.
pub fn acquire<'a>(
    c: &AdaptiveConcurrencyConfig,
    state: &'a Arc<AdaptiveState>,
    (tier, key): (Tier, u64),
    now: Duration,
    may_wait: bool,
) -> Result<Check<Place<'a>>, LimiterError> {
    // The lower tiers under the lane where it is below the limit; critical under its ceiling.
    let Some(limit) = c.tier_limit(state.lower_limit(), tier) else {
        // Critical: counted, so it takes room from every other tier; refused only past the
        // ceiling.
        return state.admit_critical(c, key, now);
    };
    let now_us = micros(now);
    let counts = &state.counts.in_flight;
    // Held off (a higher tier was just refused) while the app is still busy: refused too.
    // Once fewer than half the tier's limit are in flight, the burst that refused the higher
    // tier is over: holding on would refuse a tier for a second at a load the app carries.
    let busy = || {
        let at_or_above: u64 = counts[..=tier.index()]
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum();
        at_or_above as f64 >= limit / 2.0
    };
    if !(state.held(tier, now_us) && busy()) {
        // A request may not pass one of its tier or a higher one that waits.
        if !state.waiting_at_or_above(tier) {
            let own = &counts[tier.index()];
            let before = own.fetch_add(1, Ordering::SeqCst)
                + counts[..tier.index()]
                    .iter()
                    .map(|n| n.load(Ordering::Relaxed))
                    .sum::<u64>();
            if fits(before, limit) {
                let permit = AdaptivePermit::new(state, tier, now);
                return Ok(Check::Allowed(Place::Held(permit)));
            }
            state.release(tier, None, now);
        }
        if may_wait && c.queue > 0 {
            if let Some(slot) = state.wait(c, tier, now) {
                return Ok(Check::Allowed(slot));
            }
        }
    }
    Ok(Check::Rejected(state.refuse(c, tier, now_us), ()))
}

impl AdaptiveState {
    /// A critical request of client `key` at `now`: let in below the ceiling unless its cohort
    /// is outside the share admitted; counted either way it is let in.
    fn admit_critical(
        &self,
        c: &AdaptiveConcurrencyConfig,
        key: u64,
        now: Duration,
    ) -> Result<Check<Place<'_>>, LimiterError> {
        let tier = Tier::Critical;
        let own = &self.counts.in_flight[tier.index()];
        let admitted = || {
            Ok(Check::Allowed(Place::Held(AdaptivePermit::new(
                self, tier, now,
            ))))
        };
        if c.critical_ceiling <= 0.0 {
            own.fetch_add(1, Ordering::SeqCst);
            return admitted();
        }
        let refused = || Ok(Check::Rejected(self.refuse(c, tier, micros(now)), ()));
        let share = self.critical_share();
        if share < 1.0 && cohort_score(key, cohort_epoch(now, c.cohort_rotation.get())) >= share {
            return refused();
        }
        let others: u64 = self.counts.in_flight[1..]
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum();
        let before = (own.fetch_add(1, Ordering::SeqCst) + others) as f64;
        let limit = self.limit();
        // Each flag is written once a window, not by every request that finds it so.
        let raise = |flag: &AtomicBool| {
            if !flag.load(Ordering::Relaxed) {
                flag.store(true, Ordering::Relaxed);
            }
        };
        let ceiling = self.ceiling(limit, c.critical_ceiling);
        if before >= state::whole(ceiling).max(1.0) {
            // Given back as any slot is (a request waiting may be let in meanwhile).
            self.release(tier, None, now);
            raise(&self.critical_overflowed);
            return refused();
        }
        if before >= limit {
            raise(&self.critical_at_limit);
        }
        admitted()
    }
}

/// adaptive_concurrency as a [`Limiter`](super::Limiter): its settings are its unit.
impl super::Limiter for AdaptiveConcurrencyConfig {
    fn asks_at_most(&self) -> AskSize {
        // Its slots are this process's own, not the keyed store's.
        AskSize::default()
    }
    const NAME: LimiterName = LimiterName::AdaptiveConcurrency;
    // Its state is this process's own (`AdaptiveState`), not per key.
    const TABLES: u8 = 0;

    fn tables(&self) -> Vec<crate::store::TableSpec> {
        Vec::new()
    }

    fn restart_only(&self, _new: &Self) -> Option<&'static str> {
        None
    }

    fn keep_sized_at_start(&mut self, _own: &Self) {}

    fn problem(r: &Rejection, _policy: Option<&str>, wait: &str) -> Problem {
        if r.tier == Tier::Critical {
            return super::critical_refused(wait);
        }
        (
            "Service overloaded",
            format!(
                "The server is at the number of requests it can serve well and is refusing {} traffic first. Retry in {wait}; critical requests are still being served.",
                r.tier
            ),
        )
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod model_tests;
