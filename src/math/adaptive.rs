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
mod tests {
    use super::*;

    const MS: u64 = 1000;

    fn params() -> LimitParams {
        LimitParams {
            min: 4.0,
            max: 1000.0,
            tolerance: 1.25,
            floor_window: 30_000 * MS,
            rest: 20.0,
        }
    }

    /// A window ending at `at_ms` of `count` requests of `latency_ms` each.
    fn window(at_ms: u64, count: u64, latency_ms: u64, binding: bool) -> Window {
        Window {
            at: at_ms * MS,
            count,
            sum: count * latency_ms * MS,
            min: latency_ms * MS,
            binding,
        }
    }

    #[test]
    fn within_tolerance_the_limit_holds_and_grows_only_when_it_binds() {
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        assert_eq!(l.update(window(250, 10, 50, false)), 20.0);
        assert_eq!(l.floor(), Some(50 * MS));
        // 60 ms is within 1.25 × 50: the limit refused requests, so it grows by √20.
        let grown = l.update(window(500, 10, 60, true));
        assert!((grown - (20.0 + 20f64.sqrt())).abs() < 1e-9, "{grown}");
        // Slower than that while refusing nothing: the limit was not what the load met.
        assert_eq!(l.update(window(750, 10, 200, false)), grown);
    }

    #[test]
    fn queueing_shrinks_the_limit_by_the_gradient_at_most_halving_it() {
        let mut l = AdaptiveLimit::new(params(), 40.0, 0);
        l.update(window(250, 10, 50, false));
        // 100 ms against 1.25 × 50: gradient 0.625, and no headroom added.
        assert!((l.update(window(500, 10, 100, true)) - 25.0).abs() < 1e-9);
        // 1 s: the gradient stops at 0.5.
        assert!((l.update(window(750, 10, 1000, true)) - 12.5).abs() < 1e-9);
        // 6.25, then min (4); not below it.
        for i in 0..3 {
            l.update(window(1000 + 250 * i, 10, 1000, true));
        }
        assert_eq!(l.limit(), 4.0, "never below min");
    }

    #[test]
    fn it_settles_where_latency_is_the_tolerated_multiple_of_the_floor() {
        // A server of 8 workers × 50 ms with a FIFO queue: latency 50 ms × max(1, n/8).
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        l.update(window(250, 10, 50, false));
        let mut at = 250;
        for _ in 0..400 {
            at += 250;
            let n = l.limit();
            let latency = (50.0 * (n / 8.0).max(1.0)) as u64;
            l.update(window(at, 40, latency, true));
        }
        // Between probes the limit moves around the point where latency is 1.25 × the floor,
        // L = 1.25 × 8 = 10: at or below it, it grows by √L; above it, it shrinks.
        let settled = l.limit();
        assert!(
            settled == 4.0 || (8.0..=14.0).contains(&settled),
            "{settled}"
        );
    }

    #[test]
    fn a_binding_limit_whose_floor_is_not_confirmed_measures_it_afresh() {
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        l.update(window(250, 10, 50, false));
        // Requests take 90 ms and the limit keeps binding (at min, too little for a stale
        // floor). At 30 s the 50 ms request of the first window still confirms the floor;
        // by 60 s nothing has for 30 s.
        let mut at = 250;
        while l.probe() == Probe::Off {
            at += 250;
            l.update(window(at, 10, 90, true));
            assert!(at <= 60_500, "no probe by {at} ms");
        }
        assert!(at >= 60_000, "probed at {at} ms");
        assert_eq!(l.limit(), 4.0, "admits min_limit while measuring");
        l.update(window(at + 250, 10, 300, true)); // draining: ignored
        assert_eq!(l.probe(), Probe::Measuring);
        l.update(window(at + 500, 4, 100, true)); // measured at low concurrency
        assert_eq!(l.probe(), Probe::Off);
        assert_eq!(
            l.floor(),
            Some(100 * MS),
            "the new floor replaces the old one"
        );
        assert!(l.limit() >= 4.0);
    }

    #[test]
    fn a_floor_that_traffic_keeps_confirming_needs_no_probe() {
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        l.update(window(250, 10, 50, false));
        // Binding for two minutes, mean latency 60 ms, but some request as fast as 54 ms
        // (within 10% of the 50 ms floor) in every window: no probe.
        for i in 2..=480 {
            let mut w = window(250 * i, 10, 60, true);
            w.min = 54 * MS;
            l.update(w);
            assert_eq!(l.probe(), Probe::Off, "at {} ms", 250 * i);
        }
        // Once the fastest is 56 ms (the floor may have crept), the next due probe comes.
        let mut at = 480 * 250;
        while l.probe() == Probe::Off {
            at += 250;
            let mut w = window(at, 10, 60, true);
            w.min = 56 * MS;
            l.update(w);
            assert!(at <= 480 * 250 + 30_250, "no probe by {at} ms");
        }
    }

    #[test]
    fn a_limit_that_does_not_bind_never_probes_and_quiet_windows_change_nothing() {
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        for i in 1..=400 {
            l.update(window(250 * i, 5, 50, false));
            assert_eq!(l.probe(), Probe::Off);
        }
        assert_eq!(l.limit(), 20.0);
        assert_eq!(
            l.update(Window {
                at: 200_000 * MS,
                ..Window::default()
            }),
            20.0
        );
    }

    #[test]
    fn a_held_limit_keeps_what_overload_taught_it_through_quiet_windows() {
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        l.update(window(250, 10, 50, false));
        l.update(window(500, 10, 1000, true));
        assert!((l.update(window(750, 10, 1000, true)) - 5.0).abs() < 1e-9);
        // While the controller sheds, quiet windows leave it there.
        l.set_hold(true);
        let mut at = 750;
        for _ in 0..20 {
            at += 250;
            assert!((l.update(window(at, 10, 55, false)) - 5.0).abs() < 1e-9);
        }
        // Binding windows still move it as ever.
        at += 250;
        let grown = l.update(window(at, 10, 55, true));
        assert!((grown - (5.0 + 5f64.sqrt())).abs() < 1e-9, "{grown}");
        // Once the controller stops, the limit goes back to rest.
        l.set_hold(false);
        for _ in 0..20 {
            at += 250;
            l.update(window(at, 10, 55, false));
        }
        assert_eq!(l.limit(), 20.0);
    }

    #[test]
    fn quiet_windows_bring_a_shrunk_limit_back_to_rest_and_no_further() {
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        l.update(window(250, 10, 50, false));
        // An overload halves it twice: 5.
        l.update(window(500, 10, 1000, true));
        assert!((l.update(window(750, 10, 1000, true)) - 5.0).abs() < 1e-9);
        // Quiet but slow (200 ms): not yet.
        assert!((l.update(window(1000, 10, 200, false)) - 5.0).abs() < 1e-9);
        // Quiet and within tolerance: +√limit per window, up to rest (20).
        let grown = l.update(window(1250, 10, 55, false));
        assert!((grown - (5.0 + 5f64.sqrt())).abs() < 1e-9, "{grown}");
        let mut at = 1250;
        for _ in 0..20 {
            at += 250;
            l.update(window(at, 10, 55, false));
        }
        assert_eq!(l.limit(), 20.0);
        // A window in which nothing finished changes nothing.
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        l.update(window(250, 10, 50, false));
        l.update(window(500, 10, 1000, true));
        assert_eq!(
            l.update(Window {
                at: 750 * MS,
                ..Window::default()
            }),
            10.0
        );
    }

    #[test]
    fn a_server_that_got_slower_has_its_floor_measured_at_once() {
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        l.update(window(250, 10, 50, false));
        // Service time doubles: 20 → 10 → 5 → min (4) in three windows, then two windows at
        // min with requests still ≥ 2 × the floor: a probe, long before floor_window (30 s).
        let mut at = 250;
        while l.probe() == Probe::Off {
            at += 250;
            l.update(window(at, 10, 130, true));
            assert!(at <= 2_000, "no probe by {at} ms");
        }
        assert_eq!(at, 1_500, "three windows down to min, two there");
        l.update(window(at + 250, 4, 130, true)); // draining
        l.update(window(at + 500, 4, 100, true)); // measuring
        assert_eq!(l.probe(), Probe::Off);
        assert_eq!(l.floor(), Some(100 * MS));
        // Against the new floor, 110 ms is within tolerance: the limit grows again.
        assert!(l.update(window(at + 750, 10, 110, true)) > 4.0);

        // At min with requests 1.5 × the floor (a queue of critical requests the limit does
        // not count): no probe before floor_window.
        let mut l = AdaptiveLimit::new(params(), 4.0, 0);
        l.update(window(250, 10, 50, false));
        for i in 2..=100 {
            l.update(window(250 * i, 10, 75, true));
            assert_eq!(l.probe(), Probe::Off, "at {} ms", 250 * i);
        }
        // One slow window between ordinary ones is not two in a row.
        for i in 101..=140 {
            let latency = if i % 2 == 0 { 120 } else { 75 };
            l.update(window(250 * i, 10, latency, true));
            assert_eq!(l.probe(), Probe::Off, "at {} ms", 250 * i);
        }
    }

    #[test]
    fn new_bounds_clamp_the_limit() {
        let mut l = AdaptiveLimit::new(params(), 20.0, 0);
        l.set_params(LimitParams {
            max: 10.0,
            ..params()
        });
        assert_eq!(l.limit(), 10.0);
    }
}
