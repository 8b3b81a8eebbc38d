//! A fixed-bucket histogram of atomics: recording is a few relaxed adds, never an allocation,
//! so it can sit on the request path. Rendered in the Prometheus text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Cumulative-on-render histogram with fixed upper bounds (seconds), recorded in whole
/// nanoseconds (integer compares, no float division on the request path).
#[derive(Debug)]
pub struct AtomicHistogram {
    bounds: &'static [f64],
    bounds_nanos: Vec<u64>,
    /// One count per bound, plus the overflow (+Inf) bucket.
    counts: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
}

impl AtomicHistogram {
    /// A histogram with these ascending upper bounds.
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            bounds_nanos: bounds.iter().map(|b| (b * 1e9).round() as u64).collect(),
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
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
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Appends `name` in the text format (HELP, TYPE, buckets, sum, count) to `out`.
    pub fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            match self.bounds.get(i) {
                Some(bound) => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_bounds_inclusive() {
        static BOUNDS: [f64; 3] = [0.001, 0.01, 0.1];
        let h = AtomicHistogram::new(&BOUNDS);
        for ns in [500_000, 1_000_000, 5_000_000, 500_000_000] {
            h.record_nanos(ns);
        }
        let mut out = String::new();
        h.render("x_seconds", "help", &mut out);
        assert!(out.contains("# TYPE x_seconds histogram"));
        assert!(out.contains("x_seconds_bucket{le=\"0.001\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.01\"} 3\n"));
        assert!(out.contains("x_seconds_bucket{le=\"0.1\"} 3\n"));
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"));
        assert!(out.contains("x_seconds_count 4\n"));
        let sum: f64 = out
            .lines()
            .find_map(|l| l.strip_prefix("x_seconds_sum "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((sum - 0.5065).abs() < 1e-9);
    }
}
