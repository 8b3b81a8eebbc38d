//! The app's service time per tier (pure): what one request of a tier takes in the app when
//! it does not queue, learned from the requests the app really served.
//!
//! One fast request must not stand for every request (a 404, a preflight or a cache hit
//! answered in microseconds would make every request look free), and one tier's cost must not
//! stand for another's (a GET of 10 ms beside a charge of 200 ms). So each tier keeps the
//! mean latency of its requests per window, and its service time is a low quantile
//! ([`FLOOR_QUANTILE`]) of those means over `floor_window`, weighted by the requests in each:
//! a minority of cheap requests lowers a window's mean by their share only (the work they
//! bring is small, and so is what they take off), and a window of queueing sits above the
//! quantile. Only windows in which the fast guard refused nothing count (a binding limit
//! means a queue); a tier keeps its newest mean when every window aged out, so the floor
//! learned before a long overload outlives it.

use std::collections::VecDeque;

/// The count-weighted quantile of window means that stands for a tier's service time.
pub const FLOOR_QUANTILE: f64 = 0.2;

/// Most windows kept per tier (a floor_window of 30 s at 250 ms is 120).
const MAX_KEPT: usize = 512;

/// Per tier: (window end µs, mean latency µs, requests) of recent windows.
#[derive(Debug, Clone, Default)]
pub struct ServiceFloor {
    tiers: [VecDeque<(u64, u64, u64)>; 4],
    floors: [Option<u64>; 4],
}

impl ServiceFloor {
    /// Adds one window's means (`count[t]` requests of tier `t` whose latencies sum to
    /// `sum[t]` µs), dropping what is older than `keep_from` (but a tier's newest).
    pub fn add(&mut self, at: u64, count: [u64; 4], sum: [u64; 4], keep_from: u64) {
        for t in 0..4 {
            let q = &mut self.tiers[t];
            if let Some(mean) = sum[t].checked_div(count[t]) {
                q.push_back((at, mean, count[t]));
                if q.len() > MAX_KEPT {
                    q.pop_front();
                }
            }
            while q.len() > 1 && q.front().is_some_and(|&(a, _, _)| a < keep_from) {
                q.pop_front();
            }
            self.floors[t] = quantile(q, FLOOR_QUANTILE);
        }
    }

    /// Replaces every tier's floor by what `count` and `sum` measured (a probe at low
    /// concurrency); a tier without requests in it is scaled by how much slower the others
    /// got (`ratio`: measured over expected).
    pub fn reset(&mut self, at: u64, count: [u64; 4], sum: [u64; 4], ratio: f64) {
        for t in 0..4 {
            let q = &mut self.tiers[t];
            if let Some(mean) = sum[t].checked_div(count[t]) {
                q.clear();
                q.push_back((at, mean, count[t]));
            } else if ratio.is_finite() && ratio > 0.0 {
                for e in q.iter_mut() {
                    e.1 = (e.1 as f64 * ratio) as u64;
                }
            }
            self.floors[t] = quantile(q, FLOOR_QUANTILE);
        }
    }

    /// Each tier's service time (µs), once one of its requests was seen.
    pub fn floors(&self) -> [Option<u64>; 4] {
        self.floors
    }

    /// The mean service time (µs) of requests in the proportions `count`, each tier without
    /// a floor counted at the mean of those with one; `None` before any floor.
    pub fn mean_for(&self, count: [u64; 4]) -> Option<f64> {
        let known: Vec<u64> = self.floors.iter().flatten().copied().collect();
        if known.is_empty() {
            return None;
        }
        let fallback = known.iter().sum::<u64>() as f64 / known.len() as f64;
        let total: u64 = count.iter().sum();
        if total == 0 {
            return Some(fallback);
        }
        let work: f64 = (0..4)
            .map(|t| count[t] as f64 * self.floors[t].map_or(fallback, |f| f as f64))
            .sum();
        Some(work / total as f64)
    }
}

/// The count-weighted `q` quantile of the means in `windows`.
fn quantile(windows: &VecDeque<(u64, u64, u64)>, q: f64) -> Option<u64> {
    let total: u64 = windows.iter().map(|&(_, _, n)| n).sum();
    if total == 0 {
        return None;
    }
    let mut means: Vec<(u64, u64)> = windows.iter().map(|&(_, m, n)| (m, n)).collect();
    means.sort_unstable();
    let target = (q * total as f64).max(1.0);
    let mut seen = 0.0;
    for (m, n) in &means {
        seen += *n as f64;
        if seen >= target {
            return Some(*m);
        }
    }
    means.last().map(|&(m, _)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1000;

    #[test]
    fn each_tier_keeps_its_own_service_time() {
        let mut s = ServiceFloor::default();
        // Charges of 200 ms beside GETs of 10 ms: each tier its own.
        for i in 1..=20 {
            s.add(i * 250 * MS, [2, 0, 10, 0], [400 * MS, 0, 100 * MS, 0], 0);
        }
        assert_eq!(s.floors(), [Some(200 * MS), None, Some(10 * MS), None]);
        assert_eq!(s.mean_for([1, 0, 3, 0]), Some((230 * MS) as f64 / 4.0));
        // The POST tier, never seen, counts at the mean of the known ones.
        assert_eq!(s.mean_for([0, 1, 0, 0]), Some((105 * MS) as f64));
    }

    #[test]
    fn a_minority_of_instant_answers_moves_the_floor_by_their_share_only() {
        let mut s = ServiceFloor::default();
        // 10% of the GETs are answered in 10 µs: each window's mean falls by about 10%, so
        // the work the tier is reckoned to bring (requests × floor) stays what it was.
        for i in 1..=40 {
            s.add(
                i * 250 * MS,
                [0, 0, 20, 0],
                [0, 0, 18 * 10 * MS + 2 * 10, 0],
                0,
            );
        }
        let floor = s.floors()[2].unwrap() as f64;
        assert!((floor / (10 * MS) as f64 - 0.9).abs() < 0.01, "{floor}");
        // A few windows full of them (an attacker's burst) sit below the quantile.
        for i in 41..=42 {
            s.add(i * 250 * MS, [0, 0, 50, 0], [0, 0, 500, 0], 0);
        }
        let floor = s.floors()[2].unwrap() as f64;
        assert!(floor >= 0.85 * (10 * MS) as f64, "{floor}");
    }

    #[test]
    fn old_windows_age_out_but_a_tier_keeps_its_newest() {
        let mut s = ServiceFloor::default();
        s.add(250 * MS, [0, 0, 10, 0], [0, 0, 500 * MS, 0], 0);
        s.add(
            60_000 * MS,
            [0, 10, 0, 0],
            [0, 1000 * MS, 0, 0],
            30_000 * MS,
        );
        assert_eq!(s.floors()[2], Some(50 * MS), "kept: nothing newer");
        s.add(61_000 * MS, [0, 0, 10, 0], [0, 0, 600 * MS, 0], 31_000 * MS);
        assert_eq!(s.floors()[2], Some(60 * MS), "the old one aged out");
    }

    #[test]
    fn a_probe_replaces_the_floors_and_scales_the_tiers_it_did_not_see() {
        let mut s = ServiceFloor::default();
        s.add(250 * MS, [1, 0, 10, 0], [200 * MS, 0, 100 * MS, 0], 0);
        // The server got twice as slow: the probe saw GETs only.
        s.reset(500 * MS, [0, 0, 4, 0], [0, 0, 80 * MS, 0], 2.0);
        assert_eq!(s.floors(), [Some(400 * MS), None, Some(20 * MS), None]);
    }
}
