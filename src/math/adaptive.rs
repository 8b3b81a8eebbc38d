//! The adaptive concurrency limit (pure): a gradient on observed latency against its floor,
//! in the spirit of Envoy's adaptive concurrency filter and Netflix's concurrency-limits.
//!
//! Every window in which the limit refused a request (it was what held the load back) it moves
//! to `limit × gradient`, where `gradient = clamp(tolerance × floor / mean latency, 0.5, 1)`,
//! or grows by `√limit` when requests were no slower than `tolerance` times the floor: it
//! settles where latency is that multiple of the floor, and shrinks by at most half per window.
//! A window that refused nothing leaves the limit as it is: the load it let through did not
//! reach it, so a burst of latency then is not the limit's doing (shrinking on such bursts
//! would ratchet the limit down at a steady moderate load until it refused traffic it had
//! room for). The floor is the lowest latency seen within `floor_window`. A floor measured
//! while the limit keeps refusing would include the queue the limit allows, and creep up; so
//! while the limit binds, every `floor_window` the floor is measured afresh by admitting only
//! `min_limit` for two windows (the first drains the queue, the second measures) — unless
//! traffic itself confirmed the floor: when some request of the last `floor_window` was
//! within [`FLOOR_DRIFT`] of the floor last measured, nothing has crept and no probe is due
//! (a probe refuses every tier down to `min_limit` for half a second). When the server itself
//! got slower (a capacity drop), the limit falls to `min_limit` within a few windows and the
//! requests there are still [`STALE_FLOOR`] times slower than the floor — no queue the limit
//! allows explains that — so the floor is measured afresh at once, not a `floor_window` later.
//! A quiet window (nothing refused, latency within tolerance) brings a limit that an overload
//! shrank back towards `rest` (the initial limit) by `√limit`: the limit overload taught is not
//! kept for the next moderate load to run into — unless the limit is held
//! ([`AdaptiveLimit::set_hold`]): while worker_utilization's controller sheds, the fast guard's
//! windows are quiet because the controller carries the overload, not because it is over, and
//! a limit grown back to `rest` would let a queue build in the app ahead of critical requests.

use std::collections::VecDeque;

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

/// What one window saw: requests finished, their latencies, and whether the limit refused any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    /// The window's end (µs).
    pub at: u64,
    /// Requests that finished in it.
    pub count: u64,
    /// Sum and minimum of their latencies (µs).
    pub sum: u64,
    /// See `sum`.
    pub min: u64,
    /// Whether the limit refused a request in it.
    pub binding: bool,
}

/// Where the floor measurement stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Not measuring.
    Off,
    /// At `min_limit`, letting the queue drain.
    Draining,
    /// At `min_limit`, taking the floor from this window's latencies.
    Measuring,
}

/// The learned limit.
#[derive(Debug, Clone)]
pub struct AdaptiveLimit {
    params: LimitParams,
    limit: f64,
    /// (time, lowest latency) of recent windows.
    floors: VecDeque<(u64, u64)>,
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
}

/// How far above the last measured floor the lowest latency may be before a probe is due.
pub const FLOOR_DRIFT: f64 = 1.1;

/// How many times the floor requests at `min` must take, [`STALE_WINDOWS`] windows in a row,
/// for the floor to be measured afresh at once: at `min` in flight, a queue the limit allows
/// cannot double the latency, a slower server can.
pub const STALE_FLOOR: f64 = 2.0;

/// See [`STALE_FLOOR`].
pub const STALE_WINDOWS: u32 = 2;

impl AdaptiveLimit {
    /// A limit of `initial`, as of `now` (µs).
    pub fn new(params: LimitParams, initial: f64, now: u64) -> Self {
        Self {
            params,
            limit: initial.clamp(params.min, params.max),
            floors: VecDeque::new(),
            probe: Probe::Off,
            last_probe: now,
            anchor: None,
            lowest_since: u64::MAX,
            stale: 0,
            hold: false,
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

    /// The floor latency (µs), once one was seen.
    pub fn floor(&self) -> Option<u64> {
        self.floors.iter().map(|&(_, f)| f).min()
    }

    /// Where the floor measurement stands.
    #[cfg(test)]
    pub fn probe(&self) -> Probe {
        self.probe
    }

    /// Learns from one window; returns the limit to admit under.
    pub fn update(&mut self, w: Window) -> f64 {
        match self.probe {
            Probe::Draining => {
                self.probe = Probe::Measuring;
                return self.limit();
            }
            Probe::Measuring => {
                if w.count > 0 {
                    self.floors.clear();
                    self.floors.push_back((w.at, w.min));
                    self.anchor = Some(w.min);
                }
                self.probe = Probe::Off;
                self.last_probe = w.at;
                self.lowest_since = u64::MAX;
                return self.limit();
            }
            Probe::Off => {}
        }
        let keep_from = w.at.saturating_sub(self.params.floor_window);
        while self.floors.front().is_some_and(|&(at, _)| at < keep_from) {
            self.floors.pop_front();
        }
        if w.count > 0 {
            self.floors.push_back((w.at, w.min));
            self.anchor.get_or_insert(w.min);
            self.lowest_since = self.lowest_since.min(w.min);
        }
        let mut stale = false;
        if w.count > 0 {
            let floor = self.floor().unwrap_or(w.min).max(1) as f64;
            let mean = (w.sum as f64 / w.count as f64).max(1.0);
            let gradient = (self.params.tolerance * floor / mean).clamp(0.5, 1.0);
            if w.binding {
                stale = self.limit <= self.params.min && mean >= STALE_FLOOR * floor;
                let headroom = if gradient >= 1.0 {
                    self.limit.sqrt()
                } else {
                    0.0
                };
                self.limit =
                    (self.limit * gradient + headroom).clamp(self.params.min, self.params.max);
            } else if gradient >= 1.0 && self.limit < self.params.rest && !self.hold {
                self.limit = (self.limit + self.limit.sqrt()).min(self.params.rest);
            }
        }
        self.stale = if stale { self.stale + 1 } else { 0 };
        if self.stale >= STALE_WINDOWS {
            self.stale = 0;
            self.probe = Probe::Draining;
            return self.limit();
        }
        if w.binding && w.at.saturating_sub(self.last_probe) >= self.params.floor_window {
            let confirmed = self
                .anchor
                .is_some_and(|a| self.lowest_since as f64 <= a as f64 * FLOOR_DRIFT);
            if confirmed {
                self.last_probe = w.at;
                self.lowest_since = u64::MAX;
            } else {
                self.probe = Probe::Draining;
            }
        }
        self.limit()
    }
}

#[cfg(test)]
#[path = "adaptive_tests.rs"]
mod tests;
