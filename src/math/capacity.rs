//! The app's capacity, learned (pure): how many requests it really serves at once.
//!
//! What the app serves is measured as work: every request it answered counts for its tier's
//! service time ([`super::service`]), so 160 answers of 50 ms in a second served 8 at once,
//! whatever the mix. That work rate reaches what the app can serve at once only while it is
//! saturated, so the capacity is the work rate of saturated 2 s stretches, followed quickly
//! upwards and slowly downwards, and raised by any stretch that served more without
//! saturating. Until the app was once seen saturated none is given: a reading of demand
//! against a guess could shed an app that is merely busy (docs/capacity.md).

use super::adaptive::{AdaptiveLimit, LimitParams, Probe, Window, SATURATED, STALE_FLOOR};
use super::critical::{ceiling_cap, Known};

/// What a window says of saturation: its requests' latencies and what they should take
/// without a queue (µs, summed), and whether the limit refused any. A stretch is saturated
/// when its requests took [`SATURATED`] times what they should while the limit refused in at
/// least half its windows, or [`STALE_FLOOR`] times whatever the limit did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Evidence {
    /// The latencies (µs).
    pub latency: f64,
    /// What they should have taken (µs).
    pub expected: f64,
    /// Whether the limit refused any.
    pub binding: bool,
    /// Requests in flight at its end.
    pub in_flight: u64,
}

impl From<bool> for Evidence {
    /// A window plainly saturated (twice as slow as expected, the limit refusing) or not.
    fn from(saturated: bool) -> Self {
        Self {
            latency: if saturated { 2.0 } else { 1.0 },
            expected: 1.0,
            binding: saturated,
            in_flight: if saturated { u64::MAX } else { 0 },
        }
    }
}

/// The share of a window's requests the limit must have refused or made wait for the window
/// to count as the limit holding the app at what it serves ([`held_back`]).
pub const HELD_BACK: f64 = 0.02;

/// Whether the limit held `w`'s load back: it refused or made wait [`HELD_BACK`] of what
/// finished in it, or more. On an app of a few workers that is one request; on 100 workers
/// of 500 ms at 0.75 of their capacity, two test requests that waited for their share in a
/// burst are not an app held at its capacity (with the requests' times a little slower than
/// their floors by chance, such a stretch read the app saturated at 72 of its 100 workers).
pub fn held_back(w: &Window) -> bool {
    w.binding() && (w.refused + w.waited) as f64 >= HELD_BACK * w.total() as f64
}

/// How many times the learned capacity (plus [`REST_SLACK`]) a limit that overload shrank
/// grows back to when quiet.
pub const REST_OVER_CAPACITY: f64 = 1.5;

/// See [`REST_OVER_CAPACITY`]: requests more, for an app of a few workers whose slow route
/// queues 20 or more at 0.75 of its capacity (docs/capacity.md). Times `(1 + s) / 2` for a
/// mix whose times spread, as Kingman's formula grows a queue, up to [`MAX_SLACK_SPREAD`]
/// (`s`: the squared coefficient of variation of every request's time, from the routes'
/// service times, [`ServiceFloor::spread`](super::service::ServiceFloor::spread), and each
/// route's own spread, [`WITHIN_ROUTE_SPREAD`]).
pub const REST_SLACK: f64 = 30.0;

/// See [`REST_SLACK`]: the slack is queue ahead of critical requests at a step into overload
/// (until the controller's first sample of it turns the lane on). Four times: the real app
/// of `bench overload` (a tenth of its GETs 300 ms reports among 1 ms cache hits), whose
/// times spread 6.2 in all, holds 50 to 130 requests at the worst moment of 3 minutes at
/// 0.75C, when a few reports hold every worker; twice (a rest of 68 on its six workers)
/// refused those bursts (docs/capacity.md).
pub const MAX_SLACK_SPREAD: f64 = 4.0;

/// The most of the critical ceiling's cap ([`ceiling_cap`]) the slack a spread mix adds may
/// take the rest to: critical requests are let in past the limit only under the cap, and at
/// a step into overload, before the controller's first sample, the lower tiers hold the
/// limit. (An app's uniform rest, [`REST_SLACK`] over 1.5 times its capacity, is kept
/// whatever the cap: on one worker of 50 ms the cap is 11, and its bursts at 0.5C need more.
/// The lower tiers are held under this much of the cap, or the capacity plus [`REST_SLACK`]
/// where that is more, whatever the rest: [`CapacityEstimate::lane`].)
pub const REST_UNDER_CAP: f64 = 0.9;

/// The squared coefficient of variation taken for each route's own times (a log-normal's of
/// σ 0.5, e^0.25 − 1), which [`ServiceFloor::spread`](super::service::ServiceFloor::spread)
/// does not see: it reads each route at its service time, and the request path keeps no
/// more than a count and a sum per route.
pub const WITHIN_ROUTE_SPREAD: f64 = 0.284;

/// The share of the learned capacity the limit never falls below.
pub const MIN_OVER_CAPACITY: f64 = 0.5;

/// While the controller sheds or reads an overload ([`lane_on`]), the lower tiers are let
/// into the app up to this many times its learned capacity (the lane); past it they wait in
/// the room, where critical requests go ahead of them. The app's own first-come queue, which
/// critical requests wait in too, then holds about a quarter of its capacity (the limit, held
/// from the overload, often twice it).
pub const LANE_OVER_CAPACITY: f64 = 1.25;

/// How many times the service times may fall from those the capacity was learned at before
/// it is forgotten (see [`CapacityEstimate`]).
pub const FORGET: f64 = 2.0;

/// How long each stretch of windows is.
pub const STRETCH_US: u64 = 2_000_000;

/// How long the app must go unsaturated, serving under [`IDLE_SHARE`] of the capacity, before
/// the capacity grows back towards the most it was recently learned at (see [`RECOVER`]).
pub const RECOVER_AFTER_US: u64 = 10_000_000;

/// The share of the capacity under which an unsaturated app is not being held at its
/// capacity by the controller (which holds it between `end_of_good` and `start_of_bad`).
pub const IDLE_SHARE: f64 = 0.7;

/// How far each such stretch moves the capacity back towards the recent peak.
pub const RECOVER: f64 = 0.1;

/// How long the peak is remembered: it moves towards the capacity with this time constant.
pub const PEAK_MEMORY_US: f64 = 600_000_000.0;

/// How far a saturated stretch moves the capacity towards its work rate: quickly when it is
/// above, slowly when below.
const UP: f64 = 0.5;
const DOWN: f64 = 0.1;

/// The learned capacity and what it is learned from.
///
/// The work rates are kept over the service time they were counted with (`scale`), and read
/// back at the service time of now: a service time that moved since (a busy app's floor
/// creeping with its queue, a slower app) moves the capacity with it, so the demand read
/// against it — requests × service time over capacity — stays what was learned, requests
/// offered over requests served at saturation. Service times that fell [`FORGET`] times
/// or more are not noise nor a creeping floor but another app: a cold start of three times
/// the service time, over, would have its capacity read a third of its workers, and the
/// controller hold the warm app to what it served cold. The capacity is then forgotten,
/// and learned again at the next saturation.
#[derive(Debug, Clone, Default)]
pub struct CapacityEstimate {
    start: Option<u64>,
    work: f64,
    windows: u32,
    /// Windows of the stretch in which the limit refused requests, and the latency of its
    /// requests and what they should have taken without a queue (µs).
    binding: u32,
    latency: f64,
    expected: f64,
    /// The fewest requests in flight at the end of any of its windows.
    fewest: u64,
    /// The learned capacity and the most served, over the scale.
    learned: Option<f64>,
    at_least: f64,
    scale: f64,
    /// The scale when the capacity was last learned.
    learned_at: f64,
    /// The most the capacity was recently learned at, over the scale (it forgets over
    /// [`PEAK_MEMORY_US`]), and since when the app has not been saturated.
    peak: f64,
    calm_since: Option<u64>,
}

impl CapacityEstimate {
    /// One window of the fast guard's learning, the same in the middleware's sampler and in
    /// the simulator: the limit's bounds follow what was learned so far (`params` as
    /// configured), it learns from `w`, and the capacity from what the app served in it.
    /// Returns the limit to admit under.
    pub fn learn(&mut self, limit: &mut AdaptiveLimit, params: LimitParams, w: Window) -> f64 {
        let params = self.bounds(params, limit.service().spread(), limit.service().mean());
        if params != limit.params() {
            limit.set_params(params);
        }
        limit.set_slow_start(self.learned().is_none());
        limit.set_capacity(self.learned());
        // A window admitted under a probe (`min_limit`, to measure the service times) says
        // nothing of what the app can serve: its work rate is what the probe let in.
        let probed = limit.probe() != Probe::Off;
        let admit = limit.update(w);
        let scale = limit.service().mean().unwrap_or(0.0);
        if !probed {
            let latency = w.mean().map_or(0.0, |m| m * w.total() as f64);
            let evidence = Evidence {
                latency,
                expected: limit.work(&w),
                binding: held_back(&w),
                in_flight: w.in_flight,
            };
            self.observe(w.at, limit.work(&w), evidence, scale);
        } else {
            // Nor does its time count in the stretch: the next one starts where it ended.
            self.restart(w.at);
        }
        admit
    }

    /// Adds a window ending at `at` (µs) in which the app served `work` µs of service time
    /// (its requests, each counted for its route class's service time, whose mean is `scale`
    /// µs), and what it says of saturation.
    pub fn observe(&mut self, at: u64, work: f64, evidence: Evidence, scale: f64) {
        if scale.is_finite() && scale > 0.0 {
            self.scale = scale;
            // Only service times that fell: while they rise (a cold start's first, fastest
            // requests giving way to the slow ones) the overload is on, and a capacity
            // forgotten then would stop the controller shedding it.
            if self.learned.is_some() && scale * FORGET <= self.learned_at {
                self.learned = None;
                self.peak = 0.0;
            }
        }
        let start = *self.start.get_or_insert(at);
        if at <= start {
            return;
        }
        self.work += work.max(0.0);
        self.windows += 1;
        self.binding += u32::from(evidence.binding);
        self.latency += evidence.latency.max(0.0);
        self.expected += evidence.expected.max(0.0);
        self.fewest = if self.windows == 1 {
            evidence.in_flight
        } else {
            self.fewest.min(evidence.in_flight)
        };
        let span = at - start;
        if span < STRETCH_US {
            return;
        }
        let rate = self.work / span as f64 / self.scale.max(1.0);
        // Judged over the stretch, not window by window: a window of a few requests spread
        // log-normally (or of a rare slow route) is often slower than expected by chance,
        // a stretch of them much less often.
        let slowdown = self.latency / self.expected.max(1.0);
        // Slow without the limit refusing is saturation only if the queue stood the whole
        // stretch (CoDel's good and bad queues): never fewer requests in flight than the
        // app was serving at once. An app of two workers at 0.75 of its capacity has
        // requests take twice their service time, with a queue that keeps draining.
        let standing = self.fewest as f64 >= self.work / span as f64;
        let saturated = (self.binding * 2 >= self.windows && slowdown >= SATURATED)
            || (slowdown >= STALE_FLOOR && standing);
        self.restart(at);
        self.at_least = self.at_least.max(rate);
        if saturated || self.learned.is_none() {
            self.learned_at = self.scale;
        }
        self.learned = match self.learned {
            None if saturated => Some(rate),
            None => None,
            Some(c) if rate > c => Some(c + UP * (rate - c)),
            Some(c) if saturated => Some(c + DOWN * (rate - c)),
            Some(c) => Some(c),
        };
        self.recover(at, span, rate, saturated);
    }

    /// A capacity learned low while the app was smaller (half its workers gone for a while)
    /// is not learned back by saturation once the app is whole again: the controller, reading
    /// demand against it, holds the work at what it believes, and the app never shows more (a
    /// capacity trap, docs/capacity.md). So once the app has gone
    /// [`RECOVER_AFTER_US`] unsaturated, serving under [`IDLE_SHARE`] of the capacity — not
    /// held there by the controller — the capacity grows back towards the most it was
    /// recently learned at; the next saturation teaches it again if the app did shrink.
    fn recover(&mut self, at: u64, span: u64, rate: f64, saturated: bool) {
        let Some(c) = self.learned else {
            (self.peak, self.calm_since) = (0.0, None);
            return;
        };
        self.peak = self.peak.max(c);
        self.peak -= (self.peak - c) * (span as f64 / PEAK_MEMORY_US).min(1.0);
        if saturated {
            self.calm_since = None;
            return;
        }
        let since = *self.calm_since.get_or_insert(at);
        if at.saturating_sub(since) >= RECOVER_AFTER_US && rate < IDLE_SHARE * c {
            self.learned = Some(c + RECOVER * (self.peak - c));
        }
    }

    /// Starts the stretch afresh at `at` (µs), forgetting what it had counted.
    fn restart(&mut self, at: u64) {
        (self.start, self.work, self.windows, self.binding) = (Some(at), 0.0, 0, 0);
        (self.latency, self.expected) = (0.0, 0.0);
    }

    /// The requests the app serves at once, once it was seen saturated.
    pub fn learned(&self) -> Option<f64> {
        self.learned.map(|c| c * self.scale.max(1.0))
    }

    /// What the lower tiers are let in under once the capacity is known (else no bound):
    /// while the lane is on (`on`: [`lane_on`]), [`LANE_OVER_CAPACITY`] times the capacity;
    /// and at all times [`REST_UNDER_CAP`] of the critical ceiling's `cap`
    /// ([`ceiling_cap`]), so that critical requests, let in up to the cap, find room over the
    /// lower tiers. The limit's uniform rest may be above the cap (1.5 times the capacity and
    /// 30 on 100 × 500 ms, whose cap is 1.5 times its capacity): at a step into overload,
    /// before the controller's first sample turns the lane on, the lower tiers filled it and
    /// critical requests found the ceiling full (11 refused, `bench overload`; 7 to 20 in
    /// 20 s of 2C on each of six seeds of the fast guard's model, docs/capacity.md).
    pub fn lane(&self, on: bool, cap: f64) -> f64 {
        match self.learned() {
            Some(c) => {
                let lane = if on {
                    c * LANE_OVER_CAPACITY
                } else {
                    f64::INFINITY
                };
                lane.min((REST_UNDER_CAP * cap).max(c + REST_SLACK))
                    .max(1.0)
            }
            None => f64::INFINITY,
        }
    }

    /// The fast guard's bounds for what is learned. Quiet windows bring the limit (from
    /// below or above) to [`REST_OVER_CAPACITY`] times the capacity plus [`REST_SLACK`]: the
    /// room a burst at a moderate load needs; before the capacity is known, the same of the
    /// most the app was seen to serve at once (so the first step to overload meets a limit
    /// sized by the app, not a queue of `initial_limit`), and before anything was seen,
    /// `initial_limit`. Once the capacity is known the limit does not fall below half of it
    /// (more than `min_limit`): an app known to serve 100 at once is not cut to 4 by
    /// latencies that lag what the limit let in a moment before.
    pub fn bounds(
        &self,
        mut params: LimitParams,
        spread: f64,
        service_us: Option<f64>,
    ) -> LimitParams {
        if let Some(c) = self.learned() {
            params.min = params
                .min
                .max((c * MIN_OVER_CAPACITY).floor())
                .min(params.max);
        }
        let seen = self.learned().unwrap_or(self.at_least());
        if seen > 0.0 {
            // The spread of every request's time: the routes', and each route's own.
            let spread = (1.0 + spread) * (1.0 + WITHIN_ROUTE_SPREAD) - 1.0;
            let slack = REST_SLACK * ((1.0 + spread) / 2.0).clamp(1.0, MAX_SLACK_SPREAD);
            // Room for critical requests over it, under their ceiling's cap.
            let cap = ceiling_cap(self.learned().zip(service_us));
            // The slack a spread mix adds, not the uniform one, stops there.
            let uniform = REST_OVER_CAPACITY * seen + REST_SLACK;
            let rest = (REST_OVER_CAPACITY * seen + slack).min(uniform.max(REST_UNDER_CAP * cap));
            params.rest = rest.clamp(params.min, params.max);
        }
        params
    }

    /// The capacity, the service time it is read at and `ceiling` (`critical_ceiling`), for
    /// the critical ceiling's base; `None` until the capacity is known.
    pub fn known(&self, limit: &AdaptiveLimit, ceiling: f64) -> Option<Known> {
        Some(Known {
            capacity: self.learned()?,
            service_us: limit.service().mean().unwrap_or(0.0),
            ceiling,
        })
    }

    /// The most it was seen to serve at once (over a stretch).
    pub fn at_least(&self) -> f64 {
        self.at_least * self.scale.max(1.0)
    }
}

/// The demand (uncapped: what the app is asked for over its capacity) at which the lane is on
/// before the controller sheds: a quarter over the capacity, as the lane is. A reading of the
/// app just full is not enough: at 0.75C, a capacity just learned from a calm saturated
/// stretch read the app full (demand 0.98 to 1.0) for a sample or two, and the lane held GETs
/// in the room past their wait (`bench overload`, full length: 405 refused on the mixed app,
/// 18 on 2 × 10 ms; docs/capacity.md). An overload's first sample reads about 2.
pub const LANE_DEMAND: f64 = 1.25;

/// Whether the lane is on: worker_utilization enforces (`enforced`), and its controller sheds
/// (`amount` above 0) or its last sample read a demand of [`LANE_DEMAND`] or more. The second
/// is the first seconds of an overload, while the controller's amount climbs from its resting
/// value to 0: the limit, learned calm, then lets in a queue several times the capacity, and
/// critical requests wait in it (the mixed apps' critical p99 at 2C, `simulate`:
/// docs/capacity.md).
pub fn lane_on(amount: f64, demand: f64, enforced: bool) -> bool {
    enforced && (amount > 0.0 || demand >= LANE_DEMAND)
}

/// Forgets `w`'s waits when the lane (below the limit) held them: they are the lane's, not
/// the limit's. Read as the limit binding, they grew a limit the lane keeps unreached (to its
/// maximum, past the overload), and their stretches read saturated while the lane kept the
/// queue short, pulling the capacity under the workers (`simulate`: docs/capacity.md).
pub fn lane_waits(w: &mut Window, lane: f64, limit: f64) {
    if lane < limit {
        w.waited = 0;
    }
}

#[cfg(test)]
#[path = "capacity_tests.rs"]
mod tests;
