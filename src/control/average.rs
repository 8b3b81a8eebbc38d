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
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_average_weighs_each_reading_by_the_time_it_stood_for() {
        let mut a = TimeAverage::default();
        a.observe(ms(0), 0.0);
        // 8 in flight for 100 ms, then 0 for 300 ms: 2 on average over 400 ms.
        a.observe(ms(100), 8.0);
        a.observe(ms(250), 0.0);
        assert_eq!(a.take(ms(400), 0.0), 2.0);
        // The next interval starts where the last one ended.
        assert_eq!(a.take(ms(500), 4.0), 4.0);
    }

    #[test]
    fn with_no_time_elapsed_the_reading_is_the_average() {
        let mut a = TimeAverage::default();
        assert_eq!(a.take(ms(7), 3.0), 3.0);
        assert_eq!(a.take(ms(7), 5.0), 5.0);
        // A clock that jumps ahead takes the reading at the jump for the whole interval.
        a.observe(ms(7), 1.0);
        assert_eq!(a.take(ms(8_007), 6.0), 6.0);
    }

    #[test]
    fn a_step_inside_an_interval_counts_for_its_share() {
        // A queue of 16 that builds up three quarters into an 8 s interval read every 10 ms.
        let mut a = TimeAverage::default();
        for i in 0..=800u64 {
            let value = if i > 600 { 16.0 } else { 0.0 };
            a.observe(ms(i * 10), value);
        }
        let average = a.take(ms(8_000), 16.0);
        assert!((average - 4.0).abs() < 1e-9, "{average}");
    }

    #[test]
    fn bad_readings_and_a_clock_going_back_do_not_poison_it() {
        let mut a = TimeAverage::default();
        a.observe(ms(0), 1.0);
        a.observe(ms(100), f64::NAN);
        a.observe(ms(50), 9.0); // earlier than the last reading: no time, no weight
        assert_eq!(a.take(ms(200), 1.0), 0.5);
    }
}
