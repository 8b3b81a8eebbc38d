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
//! only on average, so a refused request holds every lower tier off for `tier_hold`, and no
//! lower-tier request passes one waiting for room ([`crate::limiter::adaptive_queue`]).

use super::adaptive_queue::{Room, Slot};
use super::{Check, Checked, LimiterName, RejectStatus, Rejection};
use crate::config::AdaptiveConcurrencyConfig;
use crate::control::{cohort_epoch, cohort_score};
use crate::math::adaptive::{LimitParams, Window};
use crate::math::critical::{critical_share, CriticalPressure};
use crate::shard::{CachePadded, Sharded};
use crate::tier::Tier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Row of [`AdaptiveState::finished`]: requests finished, and the sum of their latencies (µs).
const COUNT: usize = 0;
const SUM: usize = 1;

/// Per tier: requests in flight, and requests waiting for a slot (critical ones never wait).
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) in_flight: [AtomicU64; 4],
    pub(super) waiting: [AtomicU64; 4],
}

/// The limiter's shared state.
///
/// The in-flight and waiting counts, one of each per tier, share a cache line; an in-flight
/// count is written twice per admitted request of its tier: a POST's limit holds exactly
/// across workers (as fleet_usage's count does), a lower tier's within the requests racing
/// it. The waiting counts are read once per request and written only by waiting ones. The
/// latencies go to per-thread rows (summed once per window), and the window's minimum is
/// written only when a request beats it.
#[derive(Debug)]
pub struct AdaptiveState {
    pub(super) counts: CachePadded<Counts>,
    /// The requests waiting for a slot (locked only by them, and by releases while any wait).
    pub(super) room: Mutex<Room>,
    /// The limit to admit under (`f64` bits), published by the sampler every window.
    limit: AtomicU64,
    /// The floor latency learned (µs; 0 before any), published with the limit.
    floor: AtomicU64,
    finished: Sharded<2>,
    window_min: AtomicU64,
    pub(super) refused: AtomicU64,
    /// Per tier, until when (µs; 0: not yet) it is held off: a higher tier found no room.
    pub(super) held_until: [AtomicU64; 4],
    seen: [AtomicU64; 2], // the sums at the end of the last window
    /// The share of critical cohorts admitted (`f64` bits; 1: every client).
    critical_share: AtomicU64,
    /// This window: a critical request was refused at the ceiling / let in with the limit full.
    critical_overflowed: AtomicBool,
    critical_at_limit: AtomicBool,
}

impl AdaptiveState {
    /// State admitting under `initial`.
    pub fn new(initial: f64) -> Self {
        Self {
            counts: CachePadded(Counts::default()),
            room: Mutex::new(Room::default()),
            limit: AtomicU64::new(initial.to_bits()),
            floor: AtomicU64::new(0),
            finished: Sharded::default(),
            window_min: AtomicU64::new(u64::MAX),
            refused: AtomicU64::new(0),
            held_until: Default::default(),
            seen: Default::default(),
            critical_share: AtomicU64::new(1f64.to_bits()),
            critical_overflowed: AtomicBool::new(false),
            critical_at_limit: AtomicBool::new(false),
        }
    }

    /// The share of critical cohorts admitted (1 unless critical demand alone overflowed the
    /// ceiling lately).
    pub fn critical_share(&self) -> f64 {
        f64::from_bits(self.critical_share.load(Ordering::Relaxed))
    }

    /// Closes the critical window: the share of cohorts admitted moves by what the critical
    /// requests met in it ([`critical_share`]). Returns the new share.
    pub fn settle_critical(&self) -> f64 {
        // Both flags start afresh each window.
        let overflowed = self.critical_overflowed.swap(false, Ordering::Relaxed);
        let at_limit = self.critical_at_limit.swap(false, Ordering::Relaxed);
        let pressure = match (overflowed, at_limit) {
            (true, _) => CriticalPressure::Overflowed,
            (false, true) => CriticalPressure::AtLimit,
            (false, false) => CriticalPressure::Clear,
        };
        let share = critical_share(self.critical_share(), pressure);
        self.critical_share
            .store(share.to_bits(), Ordering::Relaxed);
        share
    }

    /// A critical request of client `key` at `now`: let in below the ceiling unless its cohort
    /// is outside the share admitted; counted either way it is let in.
    fn admit_critical(
        &self,
        c: &AdaptiveConcurrencyConfig,
        key: u64,
        now: Duration,
    ) -> Checked<Slot<'_>> {
        let tier = Tier::Critical;
        let own = &self.counts.in_flight[tier.index()];
        let admitted = || {
            Ok(Check::Allowed(Slot::Held(AdaptivePermit::new(
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
        if before >= (limit * c.critical_ceiling).floor().max(1.0) {
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

    /// The limit requests are admitted under.
    pub fn limit(&self) -> f64 {
        f64::from_bits(self.limit.load(Ordering::Relaxed))
    }

    /// Publishes a new limit, and the floor latency it was learned against.
    pub fn publish(&self, limit: f64, floor: Option<Duration>) {
        self.limit.store(limit.to_bits(), Ordering::Relaxed);
        let floor_us = floor.map_or(0, micros);
        self.floor.store(floor_us, Ordering::Relaxed);
    }

    /// The floor latency the limit was learned against, once one was seen.
    pub fn floor(&self) -> Option<Duration> {
        match self.floor.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Requests admitted by this limiter and not yet finished (critical ones too).
    pub fn in_flight(&self) -> u64 {
        self.counts
            .in_flight
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum()
    }

    /// Gives back a slot of `tier` at `now` (to a waiting request, if any); `latency` is how
    /// long the request took, if it finished (a request refused by a later limiter gives its
    /// slot back without one).
    pub fn release(&self, tier: Tier, latency: Option<Duration>, now: Duration) {
        // SeqCst, with the waiting counts: a release and a request being queued at once see
        // each other (one of them gives the slot away).
        self.counts.in_flight[tier.index()].fetch_sub(1, Ordering::SeqCst);
        if let Some(latency) = latency {
            let us = micros(latency);
            self.finished.add(COUNT, 1);
            self.finished
                .add(SUM, i64::try_from(us).unwrap_or(i64::MAX));
            if us < self.window_min.load(Ordering::Relaxed) {
                self.window_min.fetch_min(us, Ordering::Relaxed);
            }
        }
        self.dispatch(now);
    }

    /// Refuses a request of `tier` at `now` (µs), holding every lower tier off for
    /// `tier_hold`.
    pub fn refuse(&self, c: &AdaptiveConcurrencyConfig, tier: Tier, now_us: u64) -> Rejection {
        let until = now_us.saturating_add(micros(c.tier_hold.get()));
        for lower in &self.held_until[tier.index() + 1..] {
            if lower.load(Ordering::Relaxed) < until {
                lower.fetch_max(until, Ordering::Relaxed);
            }
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        Rejection {
            limiter: LimiterName::AdaptiveConcurrency,
            tier,
            status: RejectStatus::ServiceUnavailable,
            retry_after: c.retry_after.get(),
            policy: None,
        }
    }

    /// Closes the window ending at `at` (µs): what finished since the last one.
    pub fn take_window(&self, at: u64) -> Window {
        let mut delta = [0u64; 2];
        for (i, d) in delta.iter_mut().enumerate() {
            let now = self.finished.sum(i).max(0) as u64;
            *d = now.saturating_sub(self.seen[i].swap(now, Ordering::Relaxed));
        }
        Window {
            at,
            count: delta[COUNT],
            sum: delta[SUM],
            min: self.window_min.swap(u64::MAX, Ordering::Relaxed),
            binding: self.refused.swap(0, Ordering::Relaxed) > 0,
        }
    }
}

/// Whether one more request fits beside `in_flight` under a `share` of the limit (one always
/// does).
pub(super) fn fits(in_flight: u64, share: f64) -> bool {
    (in_flight as f64) < share.floor().max(1.0)
}

/// `d` in whole microseconds (saturating), the unit of the limiter's clock readings.
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

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

/// A request's slot: given back when dropped, unless [`keep`](Self::keep) handed it to the
/// request's guard, which gives it back with the request's latency.
#[derive(Debug)]
pub struct AdaptivePermit<'a> {
    state: Option<&'a AdaptiveState>,
    tier: Tier,
    admitted_at: Duration,
}

impl<'a> AdaptivePermit<'a> {
    pub(super) fn new(state: &'a AdaptiveState, tier: Tier, admitted_at: Duration) -> Self {
        Self {
            state: Some(state),
            tier,
            admitted_at,
        }
    }

    /// Hands the slot over (the request's guard gives it back under the request's tier);
    /// returns when the request was admitted, to measure its latency.
    pub fn keep(mut self) -> Duration {
        self.state = None;
        self.admitted_at
    }
}

impl Drop for AdaptivePermit<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.state {
            state.release(self.tier, None, self.admitted_at);
        }
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
) -> Checked<Slot<'a>> {
    let Some(limit) = c.tier_limit(state.limit(), tier) else {
        // Critical: counted, so it takes room from every other tier; refused only past the
        // ceiling.
        return state.admit_critical(c, key, now);
    };
    let now_us = micros(now);
    // Held off (a higher tier was just refused): refused too.
    if !state.held(tier, now_us) {
        // A request may not pass one of its tier or a higher one that waits.
        if !state.waiting_at_or_above(tier) {
            let counts = &state.counts.in_flight;
            let own = &counts[tier.index()];
            let before = own.fetch_add(1, Ordering::SeqCst)
                + counts[..tier.index()]
                    .iter()
                    .map(|n| n.load(Ordering::Relaxed))
                    .sum::<u64>();
            if fits(before, limit) {
                let permit = AdaptivePermit::new(state, tier, now);
                return Ok(Check::Allowed(Slot::Held(permit)));
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

#[cfg(test)]
mod tests;
