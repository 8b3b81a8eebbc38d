//! The time-average of a reading observed at irregular times: what a source that reads an
//! instantaneous gauge (requests in flight, a closure) reports for a whole sample interval.

use std::time::Duration;

/// How often the sampler lets sources observe between samples. Reading the in-flight count
/// sums one row per worker thread; a hundred readings a second cost nothing next to the
/// requests they describe, and resolve a queue that fills and drains within a second.
pub const OBSERVE_EVERY: Duration = Duration::from_millis(10);

/// Integrates readings over time: each reading stands for the time since the one before it
/// (so a clock that jumps ahead, as a test clock does, takes the reading at the jump).
#[derive(Debug, Clone, Default)]
pub struct TimeAverage {
    /// Start of the current interval and time of the last reading.
    since: Option<Duration>,
    last: Duration,
    /// Sum of reading × seconds since `since`.
    area: f64,
}

impl TimeAverage {
    /// Records `value` as read at `at`. A non-finite reading counts as zero.
    pub fn observe(&mut self, at: Duration, value: f64) {
        let value = if value.is_finite() { value } else { 0.0 };
        match self.since {
            None => self.since = Some(at),
            Some(_) => self.area += value * at.saturating_sub(self.last).as_secs_f64(),
        }
        self.last = self.last.max(at);
    }

    /// Records `value` at `at` and returns the average since the previous `take` (or since
    /// the first reading), then starts a new interval at `at`. With no time elapsed the
    /// average is `value` itself.
    pub fn take(&mut self, at: Duration, value: f64) -> f64 {
        self.observe(at, value);
        let since = self.since.unwrap_or(at);
        let span = self.last.saturating_sub(since).as_secs_f64();
        let average = if span > 0.0 { self.area / span } else { value };
        self.since = Some(self.last);
        self.area = 0.0;
        if average.is_finite() {
            average
        } else {
            value
        }
    }
}

#[cfg(test)]
#[path = "average_tests.rs"]
mod tests;
