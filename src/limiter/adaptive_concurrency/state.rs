//! adaptive_concurrency's shared state: the counts in flight and waiting per tier, the
//! limit published by the sampler, the window's latencies, the critical share, and the
//! slots given back (to a waiting request first, see [`super::room`]).

use super::room::{Room, Waiter, GRANTED, TURNED_AWAY};
use super::AdaptiveConcurrencyConfig;
use crate::limiter::{LimiterName, RejectStatus, Rejection};
use crate::math::adaptive::Window;
use crate::math::critical::{critical_share, CriticalPressure};
use crate::route_class::{RouteClass, RouteClasses, CLASSES};
use crate::shard::{CachePadded, Sharded};
use crate::tier::Tier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Rows of [`AdaptiveState::finished`]: per route class, requests finished (`COUNT + class`)
/// and the sum of their latencies in µs (`SUM + class`).
const COUNT: usize = 0;
const SUM: usize = CLASSES;
const ROWS: usize = 2 * CLASSES;

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
    /// The lower tiers' lane (`f64` bits; infinite until the capacity is known, and while
    /// neither it nor the cap binds), as `math::capacity::CapacityEstimate::lane` has it.
    lane: AtomicU64,
    /// What the critical ceiling is a multiple of (`f64` bits): the limits learned outside a
    /// probe of the service times (a probe admits `min_limit` for a moment; critical
    /// requests, which it does not hold back, are not refused for it), held in slow start
    /// while the requests they let in drain.
    ceiling_base: AtomicU64,
    /// The most in flight at which a critical request is let in (`f64` bits; infinite until
    /// the capacity is known): `math::critical::ceiling_cap`.
    ceiling_cap: AtomicU64,
    /// Each tier's service time learned (µs; 0 before any), published with the limit.
    floors: [AtomicU64; 4],
    /// Each route class's service time learned (µs; 0 before any), published with the limit.
    class_floors: Box<[AtomicU64; CLASSES]>,
    /// The app's capacity learned (requests at once, `f64` bits; 0 until known) and the most
    /// it was seen to serve at once.
    capacity: [AtomicU64; 2],
    finished: Sharded<ROWS>,
    /// The app's routes, each with its id (what latencies are learned per).
    routes: RouteClasses,
    window_min: AtomicU64,
    pub(super) refused: AtomicU64,
    /// Requests made to wait for a slot this window.
    pub(super) waited: AtomicU64,
    /// Per tier, until when (µs; 0: not yet) it is held off: a higher tier found no room.
    pub(super) held_until: [AtomicU64; 4],
    /// Until when (µs) a refusal is recent (no [`Wait::last_look`] lets in).
    pub(super) refusing_until: AtomicU64,
    seen: Box<[AtomicU64; ROWS]>, // the sums at the end of the last window
    /// The share of critical cohorts admitted (`f64` bits; 1: every client).
    critical_share: AtomicU64,
    /// This window: a critical request was refused at the ceiling / let in with the limit full.
    pub(super) critical_overflowed: AtomicBool,
    pub(super) critical_at_limit: AtomicBool,
}

impl AdaptiveState {
    /// State admitting under `initial`.
    pub fn new(initial: f64) -> Self {
        Self {
            counts: CachePadded(Counts::default()),
            room: Mutex::new(Room::default()),
            limit: AtomicU64::new(initial.to_bits()),
            lane: AtomicU64::new(f64::INFINITY.to_bits()),
            ceiling_base: AtomicU64::new(initial.to_bits()),
            ceiling_cap: AtomicU64::new(f64::INFINITY.to_bits()),
            floors: Default::default(),
            class_floors: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            capacity: Default::default(),
            finished: Sharded::default(),
            routes: RouteClasses::default(),
            window_min: AtomicU64::new(u64::MAX),
            refused: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            held_until: Default::default(),
            refusing_until: AtomicU64::new(0),
            seen: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
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

    /// The limit requests are admitted under.
    pub fn limit(&self) -> f64 {
        f64::from_bits(self.limit.load(Ordering::Relaxed))
    }

    /// The lane the lower tiers are let in under (infinite until the capacity is known).
    pub fn lane(&self) -> f64 {
        f64::from_bits(self.lane.load(Ordering::Relaxed))
    }

    /// What the lower tiers (all but critical) are let in under: the limit, or the lane.
    pub fn lower_limit(&self) -> f64 {
        self.limit().min(self.lane())
    }

    /// Publishes the lane (see [`lane`](Self::lane)).
    pub fn publish_lane(&self, lane: f64) {
        self.lane.store(lane.to_bits(), Ordering::Relaxed);
    }

    /// Publishes a new limit, and each tier's service time (µs) it was learned against.
    pub fn publish(&self, limit: f64, floors: [Option<u64>; 4]) {
        self.limit.store(limit.to_bits(), Ordering::Relaxed);
        self.ceiling_base.store(limit.to_bits(), Ordering::Relaxed);
        for (cell, floor) in self.floors.iter().zip(floors) {
            cell.store(floor.unwrap_or(0).max(u64::from(floor.is_some())), Ordering::Relaxed);
        }
    }

    /// Publishes each route class's service time (µs; `(class index, floor)`; the others
    /// unchanged).
    pub fn publish_classes(&self, classes: impl Iterator<Item = (usize, u64)>) {
        for (c, floor) in classes {
            if let Some(cell) = self.class_floors.get(c) {
                cell.store(floor.max(1), Ordering::Relaxed);
            }
        }
    }

    /// Each route class learned: the class and its service time.
    pub fn class_floors(&self) -> impl Iterator<Item = (RouteClass, Duration)> + '_ {
        self.class_floors.iter().enumerate().filter_map(|(c, f)| {
            match f.load(Ordering::Relaxed) {
                0 => None,
                us => Some((RouteClass::from_index(c), Duration::from_micros(us))),
            }
        })
    }

    /// Publishes the limit the critical ceiling is a multiple of
    /// ([`CeilingBase`](crate::math::critical::CeilingBase): limits learned outside a probe,
    /// held in slow start while what they let in drains; [`publish`](Self::publish) sets
    /// both).
    pub fn publish_ceiling_base(&self, base: f64) {
        self.ceiling_base.store(base.to_bits(), Ordering::Relaxed);
    }

    /// The limit the critical ceiling is a multiple of.
    pub fn ceiling_base(&self) -> f64 {
        f64::from_bits(self.ceiling_base.load(Ordering::Relaxed))
    }

    /// Publishes the most in flight at which a critical request is let in
    /// ([`ceiling_cap`](crate::math::critical::ceiling_cap)).
    pub fn publish_ceiling_cap(&self, cap: f64) {
        self.ceiling_cap.store(cap.to_bits(), Ordering::Relaxed);
    }

    /// The critical ceiling under `limit` and `critical_ceiling` (`times`).
    pub fn ceiling(&self, limit: f64, times: f64) -> f64 {
        let cap = f64::from_bits(self.ceiling_cap.load(Ordering::Relaxed));
        crate::math::critical::ceiling(limit, self.ceiling_base(), times, cap)
    }

    /// Publishes the app's capacity (requests at once; `None` until learned) and the most it
    /// was seen to serve at once.
    pub fn publish_capacity(&self, learned: Option<f64>, at_least: f64) {
        let learned = learned.filter(|c| c.is_finite() && *c > 0.0).unwrap_or(0.0);
        self.capacity[0].store(learned.to_bits(), Ordering::Relaxed);
        self.capacity[1].store(at_least.to_bits(), Ordering::Relaxed);
    }

    /// The app's capacity learned (requests it serves at once), once it was seen saturated.
    pub fn capacity(&self) -> Option<f64> {
        let c = f64::from_bits(self.capacity[0].load(Ordering::Relaxed));
        (c > 0.0).then_some(c)
    }

    /// The most the app was seen to serve at once.
    pub fn capacity_at_least(&self) -> f64 {
        f64::from_bits(self.capacity[1].load(Ordering::Relaxed))
    }

    /// Each tier's service time (what its requests take without a queue), once seen.
    pub fn floors(&self) -> [Option<Duration>; 4] {
        std::array::from_fn(|t| match self.floors[t].load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        })
    }

    /// The mean of the tiers' service times, once one was seen (for display).
    pub fn floor(&self) -> Option<Duration> {
        let known: Vec<Duration> = self.floors().into_iter().flatten().collect();
        let n = u32::try_from(known.len()).ok().filter(|&n| n > 0)?;
        Some(known.iter().sum::<Duration>() / n)
    }

    /// Requests admitted by this limiter and not yet finished (critical ones too).
    pub fn in_flight(&self) -> u64 {
        self.counts
            .in_flight
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum()
    }

    /// The app's routes, each with its id.
    pub fn routes(&self) -> &RouteClasses {
        &self.routes
    }

    /// Gives back a slot of `class`'s tier at `now` (to a waiting request, if any);
    /// `latency_us` is how long the request took in µs, if it finished (a request refused by
    /// a later limiter gives its slot back without one), learned as its route class's.
    pub fn release(&self, class: impl Into<RouteClass>, latency_us: Option<u64>, now: Duration) {
        let class = class.into();
        // SeqCst, with the waiting counts: a release and a request being queued at once see
        // each other (one of them gives the slot away).
        self.counts.in_flight[class.tier().index()].fetch_sub(1, Ordering::SeqCst);
        if let Some(us) = latency_us {
            self.finished.add(COUNT + class.index(), 1);
            self.finished
                .add(SUM + class.index(), i64::try_from(us).unwrap_or(i64::MAX));
            if us < self.window_min.load(Ordering::Relaxed) {
                self.window_min.fetch_min(us, Ordering::Relaxed);
            }
        }
        self.dispatch(now);
    }

    /// Refuses a request of `tier` at `now` (µs), holding every lower tier off for
    /// `tier_hold` (and last looks).
    pub fn refuse(&self, c: &AdaptiveConcurrencyConfig, tier: Tier, now_us: u64) -> Rejection {
        let until = now_us.saturating_add(micros(c.tier_hold.get()));
        for lower in self.held_until[tier.index() + 1..]
            .iter()
            .chain([&self.refusing_until])
        {
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
        let mut delta = [0u64; ROWS];
        for (i, d) in delta.iter_mut().enumerate() {
            let now = self.finished.sum(i).max(0) as u64;
            *d = now.saturating_sub(self.seen[i].swap(now, Ordering::Relaxed));
        }
        Window {
            at,
            count: std::array::from_fn(|c| delta[COUNT + c]),
            sum: std::array::from_fn(|c| delta[SUM + c]),
            min: self.window_min.swap(u64::MAX, Ordering::Relaxed),
            refused: self.refused.swap(0, Ordering::Relaxed),
            waited: self.waited.swap(0, Ordering::Relaxed),
            in_flight: self.in_flight(),
        }
    }
}

impl AdaptiveState {
    pub(super) fn room(&self) -> MutexGuard<'_, Room> {
        self.room
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a request of `tier` or a higher one is waiting (a newcomer of `tier` may not
    /// pass it).
    pub(super) fn waiting_at_or_above(&self, tier: Tier) -> bool {
        self.counts.waiting[Tier::Post.index()..=tier.index()]
            .iter()
            .any(|n| n.load(Ordering::SeqCst) != 0)
    }

    /// Whether `tier` is held off at `now_us` (a higher tier found no room just before).
    pub(super) fn held(&self, tier: Tier, now_us: u64) -> bool {
        now_us < self.held_until[tier.index()].load(Ordering::Relaxed)
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> u64 {
        self.counts
            .waiting
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum()
    }

    /// Settles a request taken out of the room as turned away.
    pub(super) fn turn_away(&self, turned: &Waiter) {
        self.counts.waiting[turned.tier.index()].fetch_sub(1, Ordering::SeqCst);
        turned.settle(TURNED_AWAY);
    }

    /// Gives free slots to the requests waiting, highest tier first, at `now`.
    #[inline]
    pub(crate) fn dispatch(&self, now: Duration) {
        // SeqCst, as the releases' decrements and the waiting counts' increments are: a
        // release and a request being queued at once see each other.
        if self.waiting_at_or_above(Tier::Test) {
            self.dispatch_waiting(now);
        }
    }

    /// [`dispatch`](Self::dispatch) where requests wait (out of line: only under overload).
    #[inline(never)]
    fn dispatch_waiting(&self, now: Duration) {
        let mut room = self.room();
        self.dispatch_in(&mut room, now);
    }

    pub(super) fn dispatch_in(&self, room: &mut Room, now: Duration) {
        for tier in [Tier::Post, Tier::Get, Tier::Test] {
            while !room.tiers[tier.index()].is_empty() {
                // A tier without room leaves none for the tiers below it (their shares are
                // smaller, and they count it).
                if !self.has_room(room, tier) {
                    return;
                }
                let Some(next) = room.tiers[tier.index()].pop_front() else {
                    break;
                };
                self.grant(&next, now);
            }
        }
    }

    /// Gives a waiter out of the room its slot.
    pub(super) fn grant(&self, waiter: &Waiter, now: Duration) {
        let tier = waiter.tier.index();
        self.counts.in_flight[tier].fetch_add(1, Ordering::SeqCst);
        self.counts.waiting[tier].fetch_sub(1, Ordering::SeqCst);
        waiter.granted_at.store(micros(now), Ordering::Relaxed);
        waiter.settle(GRANTED);
    }

    /// Whether `tier` has room under the limit, counting its own requests in flight and those
    /// of the tiers above it.
    pub(super) fn has_room(&self, room: &Room, tier: Tier) -> bool {
        let limit = self.lower_limit();
        let share = room.settings.tier_limit(limit, tier).unwrap_or(limit);
        let in_flight: u64 = self.counts.in_flight[..=tier.index()]
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .sum();
        fits(in_flight, share)
    }
}

/// Whether one more request fits beside `in_flight` under a `share` of the limit (one always
/// does): `in_flight < max(floor(share), 1)`, compared without rounding the share (a whole
/// number is below the floor of a share exactly when one more is at most the share). Exact
/// for every `in_flight` and finite share under 2^53 (a limit is at most `max_limit`, a
/// `u32`); past that, `in_flight + 1` rounds in `f64`.
#[inline]
pub(super) fn fits(in_flight: u64, share: f64) -> bool {
    in_flight == 0 || in_flight as f64 + 1.0 <= share
}

/// `d` in whole microseconds (saturating), the unit of the limiter's clock readings.
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `x` rounded down to a whole number, as `max(1.0)` then reads it: the same as `floor` for
/// every `x` that matters here (NaN and anything below 1 end at 1 either way), by a cast
/// instead of a call to `floor` on every request.
#[inline]
pub(crate) fn whole(x: f64) -> f64 {
    x as u64 as f64
}
