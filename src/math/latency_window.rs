//! What the adaptive limit learns from: one window's requests, finished per route class, their
//! latencies, and how many the limit refused or made wait.

use crate::route_class::CLASSES;

/// What one window saw: requests finished per route class, their latencies, and how many the
/// limit refused or made wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The window's end (µs).
    pub at: u64,
    /// Requests that finished in it, per route class (`RouteClass::index` order; a class's
    /// tier is `index % 4`).
    pub count: [u64; CLASSES],
    /// Sum of their latencies per route class (µs).
    pub sum: [u64; CLASSES],
    /// The lowest single latency (µs).
    pub min: u64,
    /// Requests the limit refused in it (at once, or after waiting for room).
    pub refused: u64,
    /// Requests the limit made wait for room in it (let in or refused later).
    pub waited: u64,
    /// Requests the limiter counted in flight at its end.
    pub in_flight: u64,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            at: 0,
            count: [0; CLASSES],
            sum: [0; CLASSES],
            min: 0,
            refused: 0,
            waited: 0,
            in_flight: 0,
        }
    }
}

impl Window {
    /// Whether the limit refused a request in it, or made one wait (it was what held the
    /// load back).
    pub fn binding(&self) -> bool {
        self.refused + self.waited > 0
    }

    /// Requests that finished in it.
    pub fn total(&self) -> u64 {
        self.count.iter().sum()
    }

    /// Their mean latency (µs), if any finished.
    pub fn mean(&self) -> Option<f64> {
        match self.total() {
            0 => None,
            n => Some(self.sum.iter().sum::<u64>() as f64 / n as f64),
        }
    }
}
