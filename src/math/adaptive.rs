//! The adaptive concurrency limit (pure): a gradient on observed latency against its floor,
//! in the spirit of Envoy's adaptive concurrency filter and Netflix's concurrency-limits.
//!
//! Every window in which the limit refused a request (it held the load back) it moves to
//! `limit × gradient`, `gradient = clamp(tolerance × floor / mean latency, 0.5, 1)`, or grows
//! by `√limit` when requests were no slower than `tolerance` times the floor: it settles where
//! latency is that multiple of the floor. It shrinks only once the queue has stood
//! [`SUSTAINED`] binding windows in a row, each ending with half the limit or more in flight
//! (CoDel's bad queue; a burst that fills the limit and drains is the good one), by the
//! gradient of those windows together (chance does not stand from one window to the next),
//! and, unless the limit is held, by no more than the share of what came that the app did not
//! finish (a draining queue is not cut), nor, once the capacity is known, than the share of
//! what came beyond what the app serves in that time (a few slow requests holding every
//! worker finish nothing for a while, at a load the app carries).
//! A window that refused nothing leaves the limit as it is: its latency is not the limit's
//! doing (shrinking on it would ratchet the limit down at a steady moderate load). The floor
//! is what the window's requests take without a queue, by their mix of route classes (each
//! class's service time, [`super::service`]), so one cheap route cannot make every request
//! look free nor a window of charges read as a queue of GETs. A floor measured while the
//! limit keeps refusing would creep up with the queue it allows; so while the limit binds,
//! every `floor_window` the floor is measured afresh by admitting only `min_limit` for two
//! windows (one drains, one measures), unless the fastest request of the last `floor_window`
//! was within [`FLOOR_DRIFT`] of the fastest when it was last measured. A slower server (a
//! capacity drop) has requests at `min_limit` still [`STALE_FLOOR`] times slower than the
//! floor, which no queue the limit allows explains: the floor is measured again at once. So
//! are first floors taken from a queue (a cold start into a load the initial limit admits
//! whole), once the queue stands.
//! A quiet window (nothing refused, latency within tolerance) brings a limit that an overload
//! shrank back towards `rest` by `√limit`, unless the limit is held
//! ([`AdaptiveLimit::set_hold`]): while worker_utilization's controller sheds, the windows
//! are quiet because it carries the overload, and a limit grown back to `rest` would let a
//! queue build in the app ahead of critical requests.

pub use super::latency_window::Window;
pub use probe::Probe;

use super::service::{ServiceFloor, SETTLE_REQUESTS};
use crate::route_class::CLASSES;

/// The limit's settings, in µs where they are times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitParams {
    /// Bounds of the limit.
    pub min: f64,
    /// See `min`.
    pub max: f64,
    /// Allowed slowdown over the floor.
    pub tolerance: f64,
    /// How long a floor sample is kept.
    pub floor_window: u64,
    /// Where quiet windows bring the limit back to (the initial limit).
    pub rest: f64,
}

/// The learned limit.
#[derive(Debug, Clone)]
pub struct AdaptiveLimit {
    params: LimitParams,
    limit: f64,
    /// Each route class's service time, from the mean latencies of recent windows.
    service: ServiceFloor,
    probe: Probe,
    last_probe: u64,
    /// The floor as last measured (by a probe, or the first window), and the lowest latency
    /// seen since: while that stays within [`FLOOR_DRIFT`] of it, the floor is confirmed by
    /// traffic and needs no probe.
    anchor: Option<u64>,
    lowest_since: u64,
    /// Binding windows in a row at `min` with latency [`STALE_FLOOR`] times the floor.
    stale: u32,
    /// Quiet windows do not bring the limit back towards `rest` (another loop is shedding).
    hold: bool,
    /// The app was never seen saturated: a binding window at the floor doubles the limit,
    /// at most once per service time (what it let in shows in the latencies only then).
    slow_start: bool,
    /// When the limit last doubled (µs).
    doubled_at: u64,
    /// Windows spent draining in the current probe, and the requests in flight at the end
    /// of the last of them.
    drained: u32,
    drain_from: u64,
    /// The floors came from a window that refused requests: measure them at the next one.
    provisional: bool,
    /// The first floors, until a window in which nothing was refused and no queue stood
    /// confirms them: measure them if a queue stands before.
    unconfirmed: bool,
    /// The last window's end (µs).
    last_at: u64,
    /// Binding windows in a row that ended with at least half the limit in flight.
    binding_run: u32,
    /// When the run of full windows began (µs): the start of its first window.
    binding_from: u64,
    /// The last [`SUSTAINED`] windows of that run: their requests' latencies and what they
    /// should have taken (µs, summed), by `binding_run % SUSTAINED`.
    run_sums: [(f64, f64); SUSTAINED as usize],
    /// The same windows' requests that came (refused or let in), and those that finished.
    run_flow: [(f64, f64); SUSTAINED as usize],
    /// The same windows' spans (µs).
    run_span: [f64; SUSTAINED as usize],
    /// The requests the app serves at once, once learned (see [`AdaptiveLimit::set_capacity`]).
    capacity: Option<f64>,
    /// Requests in flight at the last window's end.
    last_in_flight: u64,
    /// The last [`SUSTAINED`] windows' latencies and expected times of their settled classes
    /// (µs, summed), by `recent_at % SUSTAINED`.
    recent: [(f64, f64); SUSTAINED as usize],
    recent_at: usize,
}

/// How far above the last measured floor the lowest latency may be before a probe is due.
pub const FLOOR_DRIFT: f64 = 1.1;

/// How many times their service time a binding window's requests must take for the app to
/// count as saturated (the limit settles where they take `tolerance` times it).
pub const SATURATED: f64 = 1.1;

/// How many times the floor requests at `min` must take, [`STALE_WINDOWS`] windows in a row,
/// for the floor to be measured afresh at once: at `min` in flight, a queue the limit allows
/// cannot double the latency, a slower server can.
pub const STALE_FLOOR: f64 = 1.6;

/// See [`STALE_FLOOR`].
pub const STALE_WINDOWS: u32 = 2;

/// How slow (over the floor) a binding window's requests may be for the limit to double
/// while the capacity is unknown.
pub const SLOW_START_SLOWDOWN: f64 = 1.05;

/// Binding windows in a row, each ending with at least half the limit in flight, before the
/// gradient cuts the limit.
pub const SUSTAINED: u32 = 3;

impl AdaptiveLimit {
    /// A limit of `initial`, as of `now` (µs).
    pub fn new(params: LimitParams, initial: f64, now: u64) -> Self {
        Self {
            params,
            limit: initial.clamp(params.min, params.max),
            service: ServiceFloor::default(),
            probe: Probe::Off,
            last_probe: now,
            anchor: None,
            lowest_since: u64::MAX,
            stale: 0,
            hold: false,
            slow_start: false,
            doubled_at: 0,
            drained: 0,
            drain_from: u64::MAX,
            provisional: false,
            unconfirmed: false,
            last_at: now,
            binding_run: 0,
            binding_from: 0,
            run_sums: [(0.0, 0.0); SUSTAINED as usize],
            run_flow: [(0.0, 0.0); SUSTAINED as usize],
            run_span: [0.0; SUSTAINED as usize],
            capacity: None,
            last_in_flight: 0,
            recent: [(0.0, 0.0); SUSTAINED as usize],
            recent_at: 0,
        }
    }

    /// Changes the settings (a live update), keeping the limit within the new bounds.
    pub fn set_params(&mut self, params: LimitParams) {
        self.params = params;
        self.limit = self.limit.clamp(params.min, params.max);
    }

    /// Whether quiet windows leave the limit where it is.
    pub fn set_hold(&mut self, hold: bool) {
        self.hold = hold;
    }

    /// Whether the app's capacity is still unknown: until it is, a window in which the limit
    /// refused requests that were no slower than the floor doubles the limit (instead of
    /// adding `√limit`), so an app serving many more than `initial_limit` at once is not
    /// refused for seconds at a load it carries.
    pub fn set_slow_start(&mut self, slow_start: bool) {
        self.slow_start = slow_start;
    }

    /// The settings in force.
    pub fn params(&self) -> LimitParams {
        self.params
    }

    /// The limit requests are admitted under: `min` while the floor is measured.
    pub fn limit(&self) -> f64 {
        match self.probe {
            Probe::Off => self.limit,
            Probe::Draining | Probe::Measuring => self.params.min,
        }
    }

    /// The limit learned, whether or not a probe admits `min` now.
    pub fn learned(&self) -> f64 {
        self.limit
    }

    /// Each tier's service time (µs): what its requests take in the app without a queue.
    pub fn service(&self) -> &ServiceFloor {
        &self.service
    }

    /// What a window's requests should take on average without a queue (µs), by its mix of
    /// route classes (a class not seen yet at its tier's).
    fn expected(&self, w: &Window) -> Option<f64> {
        self.service.mean_for(&w.count)
    }

    /// How long the next window lasts (µs): `window`, or twice the slowest tier's service
    /// time if longer. What the limit lets in shows in the latencies one service time later;
    /// a limit that moved every 250 ms on requests of 500 ms would act two or three times on
    /// the same news (halving on a queue it had already cut, growing past the point it was
    /// about to learn of) and swing between `min_limit` and far past the capacity.
    pub fn period(&self, window: u64) -> u64 {
        let slowest = self
            .service
            .floors()
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(0);
        window.max(slowest.saturating_mul(2))
    }

    /// The work `w`'s requests brought the app (µs of service time), by their tiers' floors.
    pub fn work(&self, w: &Window) -> f64 {
        self.service
            .mean_for(&w.count)
            .map_or(0.0, |m| m * w.total() as f64)
    }

    /// Where the floor measurement stands.
    pub fn probe(&self) -> Probe {
        self.probe
    }

    /// Learns from one window; returns the limit to admit under.
    pub fn update(&mut self, w: Window) -> f64 {
        let span = w.at.saturating_sub(self.last_at).max(1) as f64;
        self.last_at = w.at;
        // What came: let in (finished, or in flight beyond the last window's) or refused.
        let admitted = (w.total() + w.in_flight).saturating_sub(self.last_in_flight);
        self.last_in_flight = w.in_flight;
        if self.probe != Probe::Off {
            self.probe_window(&w);
            return self.limit();
        }
        let keep_from = w.at.saturating_sub(self.params.floor_window);
        // A window that refused nothing, and whose requests were no slower than `tolerance`
        // times expected, measured the app without much of a queue (a looser bar would let
        // the floor creep up on the queues of a busy app). Whether it queued is read from the
        // classes whose service time is settled (SETTLE_REQUESTS): a queue in the app slows
        // every route alike, so they say it for a class not settled yet too, whose own cost
        // is what is not known (on a cold start its first requests to finish are its
        // fastest, and a floor pinned on them would leave every later window out as queued).
        // A window of unsettled classes alone counts if it refused nothing, and before any
        // class has a floor, any window counts (there is nothing else yet).
        let (mut count, mut sum) = (w.count, w.sum);
        let (mut took, mut expected) = (0.0, 0.0);
        for c in (0..CLASSES).filter(|&c| count[c] > 0 && self.service.settled(c)) {
            took += sum[c] as f64;
            expected += count[c] as f64 * self.service.class_floor(c).unwrap_or(0.0);
        }
        let judged = expected > 0.0;
        // Judged over this window and the SUSTAINED - 1 before it: a queue stands from one
        // window to the next, chance does not. A window of a few requests spread
        // log-normally is often a quarter slower than its mix by chance; leaving each such
        // window out, and keeping those faster by chance, would pull every floor low (to
        // four fifths of a route's time), and every window would then read as a queue.
        self.recent[self.recent_at % SUSTAINED as usize] = (took, expected);
        self.recent_at += 1;
        let (took_recent, expected_recent) = summed(&self.recent);
        let queued = judged && took_recent > self.params.tolerance * expected_recent.max(1.0);
        // A queue that stands: every one of [`SETTLE_REQUESTS`] requests or more slower than
        // what the window's mix should take on average (chance makes some faster, a queue
        // makes every one wait), and at least as many in flight at its end as the app served
        // at once in it.
        let queue_stands = w.total() >= SETTLE_REQUESTS
            && matches!(self.expected(&w), Some(e) if w.min as f64 > e)
            && w.in_flight as f64 * span >= self.work(&w);
        let any = self.service.mean().is_some();
        if any && !w.binding() && !queue_stands {
            self.unconfirmed = false;
        }
        // A window that refused is left out even when it was faster than expected: under a
        // standing queue only the windows fast by chance would be kept, and each class's
        // floor would sink through an overload (a mixed app's 100 ms route to 54 ms in three
        // minutes at 2C, its capacity read at a third of its workers). Floors learned under
        // a queue come down through probes and quiet windows.
        for c in 0..CLASSES {
            if count[c] == 0 {
                continue;
            }
            let keep = if judged {
                !w.binding() && !queued
            } else {
                !w.binding() || !any
            };
            if !keep {
                (count[c], sum[c]) = (0, 0);
            }
        }
        // A cold start into overload, or into a load the initial limit admits whole, has its
        // first requests to finish wait behind others. The first floors are provisional if
        // taken from a window that refused requests (a probe measures them at the next that
        // does), and unconfirmed if it ended with at least as many in flight as its requests
        // kept busy on average (Little's law; a probe measures them if a queue stands before
        // a window without one confirms them). (A mean far above the window's fastest
        // request says nothing alone: a cheap route, or times spread log-normally, put it
        // there without any queue.)
        let held = w.sum.iter().sum::<u64>() as f64 / span;
        if !any && w.total() > 0 && w.in_flight as f64 >= held {
            self.unconfirmed = true;
        }
        if !any && w.total() > 0 && w.binding() {
            self.provisional = true;
        }
        self.service.add(w.at, &count, &sum, keep_from);
        if w.total() > 0 {
            self.anchor.get_or_insert(w.min);
            self.lowest_since = self.lowest_since.min(w.min);
        }
        let mut stale = false;
        // A queue that drained by the window's end (fewer than half the limit in flight) was
        // a burst the app absorbed, not one standing.
        let full = w.binding() && w.in_flight as f64 >= self.limit / 2.0;
        self.binding_run = if full { self.binding_run + 1 } else { 0 };
        if self.binding_run == 1 {
            self.binding_from = w.at.saturating_sub(span as u64);
        }
        if full {
            let came = (admitted + w.refused) as f64;
            self.run_flow[(self.binding_run % SUSTAINED) as usize] = (came, w.total() as f64);
            self.run_span[(self.binding_run % SUSTAINED) as usize] = span;
        }
        if let (Some(mean), Some(floor)) = (w.mean(), self.expected(&w)) {
            let (mean, floor) = (mean.max(1.0), floor.max(1.0));
            let gradient = (self.params.tolerance * floor / mean).clamp(0.5, 1.0);
            if full {
                let n = w.total() as f64;
                self.run_sums[(self.binding_run % SUSTAINED) as usize] = (mean * n, floor * n);
            }
            if w.binding() {
                // At min_limit, with no more than that in flight (no queue of critical
                // requests explains it), requests much slower than expected mean a slower app.
                stale = self.limit <= self.params.min
                    && w.in_flight <= self.params.min as u64
                    && mean >= STALE_FLOOR * floor;
                let since = w.at.saturating_sub(self.doubled_at) as f64;
                // And the window began a service time after the limit began to bind: before
                // that, the requests that finish in it were let in before it bound, whatever
                // came since (100 × 500 ms stepped into 2C had its limit doubled from 156 to
                // 313 on the answers of its calm, and its queue went past the clients'
                // deadline: 112 critical requests timed out).
                let bound =
                    w.at.saturating_sub(span as u64)
                        .saturating_sub(self.binding_from);
                // Doubling wants requests as fast as without any queue (what the limit let in
                // shows in them a service time later).
                // And a limit in use: a refusal of `tier_hold` with little in flight says
                // nothing of what the app can take.
                let doubles = self.slow_start
                    && since >= floor
                    && bound as f64 >= floor
                    && mean <= SLOW_START_SLOWDOWN * floor
                    && full;
                // Cut only on a queue that stood SUSTAINED windows in a row (CoDel's bad
                // queue): an app of a few workers with a slow route, well below its capacity,
                // has bursts that fill the limit for a window or two and drain, and a limit
                // cut on one refuses the next, while its latencies (which lag what the limit
                // let in) would cut it again and again as the burst drains.
                let standing = self.binding_run >= SUSTAINED;
                let cut = if standing {
                    self.standing_cut()
                } else {
                    gradient
                };
                let headroom = if gradient >= 1.0 && doubles {
                    self.doubled_at = w.at;
                    self.limit
                } else if gradient >= 1.0 {
                    self.limit.sqrt()
                } else {
                    0.0
                };
                if gradient >= 1.0 {
                    self.limit =
                        (self.limit * gradient + headroom).clamp(self.params.min, self.params.max);
                } else if standing {
                    self.limit = (self.limit * cut).clamp(self.params.min, self.params.max);
                }
            } else if gradient >= 1.0 && self.limit < self.params.rest && !self.hold {
                self.limit = (self.limit + self.limit.sqrt()).min(self.params.rest);
            } else if self.limit > self.params.rest {
                // A limit above its rest that refuses nothing is room no load has used (or a
                // queue the app is already slow with): it comes down towards the rest (by the
                // gradient, when there is a queue), so the next step meets a limit sized by
                // what the app was seen to serve, not a queue of `initial_limit`, and a load
                // of fewer clients than that is trimmed too.
                let down = (self.limit * gradient).min(self.limit - self.limit.sqrt());
                self.limit = down.max(self.params.rest);
            }
        }
        self.stale = if stale { self.stale + 1 } else { 0 };
        if self.stale >= STALE_WINDOWS {
            self.stale = 0;
            self.start_probe();
            return self.limit();
        }
        if w.binding() && w.at.saturating_sub(self.last_probe) >= self.params.floor_window {
            let confirmed = self
                .anchor
                .is_some_and(|a| self.lowest_since as f64 <= a as f64 * FLOOR_DRIFT);
            if confirmed {
                self.last_probe = w.at;
                self.lowest_since = u64::MAX;
            } else {
                self.start_probe();
            }
        } else if (self.provisional && w.binding()) || (self.unconfirmed && queue_stands) {
            self.start_probe();
        }
        self.limit()
    }
}

/// The latencies and expected times (µs) of a few windows, summed.
fn summed(windows: &[(f64, f64)]) -> (f64, f64) {
    windows
        .iter()
        .fold((0.0, 0.0), |(t, e), &(a, b)| (t + a, e + b))
}

#[path = "probe.rs"]
mod probe;

#[path = "standing.rs"]
mod standing;

#[cfg(test)]
#[path = "adaptive_tests.rs"]
mod tests;
