//! A fixed-bucket histogram of atomics: recording is two relaxed adds to this thread's own
//! shard, never an allocation, so it can sit on the request path. Rendered in the Prometheus
//! text format.

use crate::shard::Sharded;
use std::fmt::Write;

pub(super) const DECISION: &str = "brownout_decision_duration_seconds";
pub(super) const DECISION_HELP: &str =
    "Time the middleware spent deciding about a request, in seconds (one decision in 16 per thread is timed).";

/// Decision-time histogram buckets, in seconds (100 ns .. 10 ms).
pub(super) static DECISION_BUCKETS: [f64; 12] = [
    1e-7, 2.5e-7, 5e-7, 1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 1e-4, 1e-3, 5e-3, 1e-2,
];

pub(super) const DELAY: &str = "brownout_request_delay_seconds";
pub(super) const DELAY_HELP: &str =
    "How long request_rate held a request for its turn (excess: delay), in seconds.";

/// Delay histogram buckets, in seconds (1 ms .. 60 s, `max_delay`'s range).
pub(super) static DELAY_BUCKETS: [f64; 12] = [
    1e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// Most bounds a histogram may have (its counters: one per bound, +Inf, and the sum).
const MAX_BOUNDS: usize = 14;

/// Cumulative-on-render histogram with fixed upper bounds (seconds), recorded in whole
/// nanoseconds (integer compares, no float division on the request path).
#[derive(Debug)]
pub struct AtomicHistogram {
    bounds: &'static [f64],
    bounds_nanos: Vec<u64>,
    /// One count per bound, then the overflow (+Inf) bucket, then the sum in nanoseconds.
    counts: Sharded<{ MAX_BOUNDS + 2 }>,
}

impl AtomicHistogram {
    /// A histogram with these ascending upper bounds (at most 14).
    pub fn new(bounds: &'static [f64]) -> Self {
        assert!(bounds.len() <= MAX_BOUNDS, "at most {MAX_BOUNDS} bounds");
        Self {
            bounds,
            bounds_nanos: bounds.iter().map(|b| (b * 1e9).round() as u64).collect(),
            counts: Sharded::default(),
        }
    }

    /// Records one observation of `nanos` nanoseconds.
    pub fn record_nanos(&self, nanos: u64) {
        // Most observations land in the first few buckets: a linear scan predicts well.
        let slot = self
            .bounds_nanos
            .iter()
            .position(|&b| nanos <= b)
            .unwrap_or(self.bounds_nanos.len());
        self.counts.add(slot, 1);
        self.counts
            .add(MAX_BOUNDS + 1, i64::try_from(nanos).unwrap_or(i64::MAX));
    }

    /// Appends `name` in the text format (HELP, TYPE, buckets, sum, count) to `out`.
    pub fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for i in 0..=self.bounds.len() {
            cumulative += self.counts.sum(i);
            match self.bounds.get(i) {
                Some(bound) => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let sum = self.counts.sum(MAX_BOUNDS + 1) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

#[cfg(test)]
#[path = "histogram_tests.rs"]
mod tests;
