//! The adaptive limit's floor probe: admitting only `min_limit` until what is in the app
//! drains, then taking the floors from the next window's latencies.

use super::{AdaptiveLimit, Window, FLOOR_DRIFT, SUSTAINED};
use crate::route_class::CLASSES;

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

/// Most windows a probe waits for the app to drain to `min_limit` before it measures.
pub const DRAIN_WINDOWS: u32 = 8;

impl AdaptiveLimit {
    /// Learns from a window admitted under the probe.
    pub(super) fn probe_window(&mut self, w: &Window) {
        match self.probe {
            // Until what is in the app is down to min_limit (a deep queue takes more than a
            // window to drain), or no lower than a window before (critical requests, which
            // the limit does not refuse, keep the rest in flight), at most DRAIN_WINDOWS
            // windows.
            Probe::Draining => {
                self.drained += 1;
                if w.in_flight <= self.params.min as u64
                    || w.in_flight >= self.drain_from
                    || self.drained >= DRAIN_WINDOWS
                {
                    self.probe = Probe::Measuring;
                }
                self.drain_from = w.in_flight;
            }
            // A probe that could not drain (critical requests kept more in flight) measured
            // the app behind what queue they made: it keeps the floors, unless its requests
            // were faster than them (a queue only slows them: floors above what was measured
            // were learned under one), which it then scales down.
            Probe::Measuring => {
                let drained = w.in_flight <= self.params.min as u64;
                let mean = w.mean().unwrap_or(f64::INFINITY);
                let ratio = self.expected(w).map_or(1.0, |e| mean / e.max(1.0));
                if w.total() > 0 && (drained || ratio < 1.0) {
                    // Undrained, it says by how much the floors are too high, not what each
                    // class costs (a class or two of the mix measured on a request or two).
                    let none = [0; CLASSES];
                    let (count, sum) = if drained {
                        (&w.count, &w.sum)
                    } else {
                        (&none, &none)
                    };
                    // Floors confirmed by traffic (a probe for their drift) fall by at
                    // most FLOOR_DRIFT a probe: a probe's few requests of a slow route are
                    // its fastest ([`ServiceFloor::reset`]), and each probe (every
                    // `floor_window` while the limit binds) takes them lower if they are
                    // still high. Floors learned behind a queue go at once.
                    let fall = if self.provisional || self.unconfirmed {
                        0.0
                    } else {
                        1.0 / FLOOR_DRIFT
                    };
                    self.service.reset(w.at, (count, sum), ratio, fall);
                    // What the last windows were judged against is gone.
                    self.recent = [(0.0, 0.0); SUSTAINED as usize];
                    self.anchor = Some(w.min);
                    (self.provisional, self.unconfirmed) = (false, false);
                }
                self.end_probe(w.at);
            }
            Probe::Off => {}
        }
    }

    /// Admits `min` until what is in the app drains, then measures the floors.
    pub(super) fn start_probe(&mut self) {
        self.probe = Probe::Draining;
        self.drained = 0;
        self.drain_from = u64::MAX;
    }

    /// Back to the learned limit after a probe that ended at `at` (µs).
    fn end_probe(&mut self, at: u64) {
        self.probe = Probe::Off;
        self.last_probe = at;
        self.lowest_since = u64::MAX;
    }
}

#[cfg(test)]
#[path = "probe_tests.rs"]
mod tests;
