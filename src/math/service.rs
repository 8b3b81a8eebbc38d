//! The app's service time per route class (pure): what one request of a route takes in the
//! app when it does not queue, learned from the requests the app really served.
//!
//! One fast request must not stand for every request (a 404, a preflight or a cache hit
//! answered in microseconds would make every request look free), and one route's cost must
//! not stand for another's (a GET of 10 ms beside a report of 300 ms). So each route class
//! (a route in a tier, [`crate::route_class`]) keeps its own mean latency, and a window is
//! judged against what its own mix of classes should take: a cheap route's share moving from
//! window to window is not queueing.
//!
//! A class's service time is a low quantile ([`FLOOR_QUANTILE`]) of the means of its recent
//! *samples*, each at least [`SAMPLE_REQUESTS`] of its requests pooled over consecutive
//! windows (a window of a few requests has a mean too noisy for a low quantile of it to be
//! the class's cost: with log-normal times, the 0.2 quantile of single requests is half their
//! mean), weighted by the requests in each: samples taken with a queue sit above the
//! quantile. Only windows in which the fast guard refused nothing count (a binding limit
//! means a queue); a class keeps its newest sample when every one aged out, so the floor
//! learned before a long overload outlives it. Until a class has a whole sample its service
//! time is the mean of what it has. A tier's service time is the mean of its classes'
//! weighted by their recent requests (what a request of the tier costs in the mix it comes
//! in: a refused request's route is not known, its tier is).

use crate::route_class::{tier_index, CLASSES};
use std::collections::VecDeque;

/// The count-weighted quantile of sample means that stands for a class's service time.
pub const FLOOR_QUANTILE: f64 = 0.2;

/// Requests pooled into one sample of a class.
pub const SAMPLE_REQUESTS: u64 = 48;

/// Requests a class's service time must stand on before windows that look queued against
/// it are left out of it ([`ServiceFloor::settled`]).
pub const SETTLE_REQUESTS: u64 = 16;

/// Most samples kept per class.
const MAX_KEPT: usize = 256;

/// One class's samples: (end µs, mean latency µs, requests), and the requests pooled since.
#[derive(Debug, Clone, Default)]
struct Class {
    samples: VecDeque<(u64, u64, u64)>,
    /// Requests and the sum of their latencies (µs) not yet a whole sample.
    pending: (u64, u64),
    floor: Option<u64>,
}

impl Class {
    /// Requests behind its floor (its weight in its tier's mix).
    fn weight(&self) -> u64 {
        self.samples.iter().map(|&(_, _, n)| n).sum::<u64>() + self.pending.0
    }

    fn settle(&mut self) {
        self.floor = quantile(&self.samples, FLOOR_QUANTILE)
            .or_else(|| self.pending.1.checked_div(self.pending.0))
            .or(self.floor);
    }
}

/// Per class, the samples behind its service time; per tier, the mix of its classes.
#[derive(Debug, Clone)]
pub struct ServiceFloor {
    classes: Vec<Class>,
    tiers: [Option<u64>; 4],
}

impl Default for ServiceFloor {
    fn default() -> Self {
        Self {
            classes: vec![Class::default(); CLASSES],
            tiers: [None; 4],
        }
    }
}

impl ServiceFloor {
    /// Adds one window's requests (`count[c]` requests of class `c` whose latencies sum to
    /// `sum[c]` µs), dropping samples older than `keep_from` (but a class's newest).
    pub fn add(&mut self, at: u64, count: &[u64; CLASSES], sum: &[u64; CLASSES], keep_from: u64) {
        for (c, class) in self.classes.iter_mut().enumerate() {
            if count[c] > 0 {
                let (n, s) = &mut class.pending;
                *n += count[c];
                *s = s.saturating_add(sum[c]);
                if *n >= SAMPLE_REQUESTS {
                    class.samples.push_back((at, *s / *n, *n));
                    class.pending = (0, 0);
                    if class.samples.len() > MAX_KEPT {
                        class.samples.pop_front();
                    }
                }
            }
            let q = &mut class.samples;
            while q.len() > 1 && q.front().is_some_and(|&(a, _, _)| a < keep_from) {
                q.pop_front();
            }
            if count[c] > 0 || !q.is_empty() {
                class.settle();
            }
        }
        self.settle_tiers();
    }

    /// Replaces the floor of every class in `count` by what `count` and `sum` measured (a
    /// probe at low concurrency); a class without requests in it is scaled by how much slower
    /// the others got (`ratio`: measured over expected).
    pub fn reset(&mut self, at: u64, count: &[u64; CLASSES], sum: &[u64; CLASSES], ratio: f64) {
        for (c, class) in self.classes.iter_mut().enumerate() {
            if let Some(mean) = sum[c].checked_div(count[c]) {
                class.samples.clear();
                class.samples.push_back((at, mean, count[c]));
                class.pending = (0, 0);
            } else if ratio.is_finite() && ratio > 0.0 {
                for e in &mut class.samples {
                    e.1 = (e.1 as f64 * ratio) as u64;
                }
                class.pending.1 = (class.pending.1 as f64 * ratio) as u64;
                class.floor = class.floor.map(|f| (f as f64 * ratio) as u64);
            }
            class.settle();
        }
        self.settle_tiers();
    }

    fn settle_tiers(&mut self) {
        let mut work = [0f64; 4];
        let mut weight = [0u64; 4];
        for (c, class) in self.classes.iter().enumerate() {
            if let Some(f) = class.floor {
                let n = class.weight().max(1);
                work[tier_index(c)] += f as f64 * n as f64;
                weight[tier_index(c)] += n;
            }
        }
        for t in 0..4 {
            if weight[t] > 0 {
                self.tiers[t] = Some((work[t] / weight[t] as f64).round() as u64);
            }
        }
    }

    /// Each tier's service time (µs), once one of its requests was seen: its classes' by
    /// their recent requests.
    pub fn floors(&self) -> [Option<u64>; 4] {
        self.tiers
    }

    /// Each class's service time (µs), once seen, and the requests behind it.
    pub fn classes(&self) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        self.classes
            .iter()
            .enumerate()
            .filter_map(|(c, class)| class.floor.map(|f| (c, f, class.weight())))
    }

    /// Whether class `c`'s service time stands on [`SETTLE_REQUESTS`] requests at least:
    /// until it does, it is the mean of one or two, and on a cold start those are the ones
    /// that finished first, the fastest of a slow route.
    pub fn settled(&self, c: usize) -> bool {
        self.classes[c].weight() >= SETTLE_REQUESTS
    }

    /// The service time (µs) class `c` is reckoned at: its own, else its tier's, else the mean
    /// of the tiers'; `None` before any.
    pub fn class_floor(&self, c: usize) -> Option<f64> {
        if let Some(f) = self.classes[c].floor {
            return Some(f as f64);
        }
        self.tier_floor(tier_index(c))
    }

    /// The service time (µs) a request of tier `t` is reckoned at: its tier's, else the mean
    /// of the tiers'; `None` before any.
    pub fn tier_floor(&self, t: usize) -> Option<f64> {
        if let Some(f) = self.tiers[t] {
            return Some(f as f64);
        }
        self.mean()
    }

    /// The mean of the tiers' service times (µs), once one is known.
    pub fn mean(&self) -> Option<f64> {
        let known: Vec<u64> = self.tiers.iter().flatten().copied().collect();
        let n = known.len();
        (n > 0).then(|| known.iter().sum::<u64>() as f64 / n as f64)
    }

    /// The mean service time (µs) of requests in the proportions `count` (per class), each
    /// class without a floor counted at its tier's; `None` before any floor.
    pub fn mean_for(&self, count: &[u64; CLASSES]) -> Option<f64> {
        let fallback = self.mean()?;
        let total: u64 = count.iter().sum();
        if total == 0 {
            return Some(fallback);
        }
        let work: f64 = count
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(c, &n)| n as f64 * self.class_floor(c).unwrap_or(fallback))
            .sum();
        Some(work / total as f64)
    }
}

/// The count-weighted `q` quantile of the means in `samples`.
fn quantile(samples: &VecDeque<(u64, u64, u64)>, q: f64) -> Option<u64> {
    let total: u64 = samples.iter().map(|&(_, _, n)| n).sum();
    if total == 0 {
        return None;
    }
    let mut means: Vec<(u64, u64)> = samples.iter().map(|&(_, m, n)| (m, n)).collect();
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
    use crate::rng::SplitMix64;
    use crate::route_class::on_one_route;

    const MS: u64 = 1000;

    /// Class `route`'s index in `tier` (`Tier::index` order).
    fn class(route: usize, tier: usize) -> usize {
        route * 4 + tier
    }

    #[test]
    fn each_tier_keeps_its_own_service_time() {
        let mut s = ServiceFloor::default();
        // Charges of 200 ms beside GETs of 10 ms: each tier its own.
        for i in 1..=40 {
            s.add(
                i * 250 * MS,
                &on_one_route([4, 0, 32, 0]),
                &on_one_route([800 * MS, 0, 320 * MS, 0]),
                0,
            );
        }
        assert_eq!(s.floors(), [Some(200 * MS), None, Some(10 * MS), None]);
        assert_eq!(
            s.mean_for(&on_one_route([1, 0, 3, 0])),
            Some((230 * MS) as f64 / 4.0)
        );
        // The POST tier, never seen, counts at the mean of the known ones.
        assert_eq!(
            s.mean_for(&on_one_route([0, 1, 0, 0])),
            Some((105 * MS) as f64)
        );
    }

    #[test]
    fn a_window_is_judged_by_its_own_mix_of_routes() {
        // GETs to a route answered at once (20 µs) beside GETs of 100 ms, the cheap share
        // moving from 0 to 60% from window to window, a dozen requests each: every window's
        // mean is what its mix should take, none reads as a queue.
        let mut s = ServiceFloor::default();
        let mut rng = SplitMix64::new(7);
        let (cheap, slow) = (class(0, 2), class(1, 2));
        let mut worst: f64 = 1.0;
        for i in 1..=400u64 {
            let mut count = [0; CLASSES];
            let mut sum = [0; CLASSES];
            let share = 0.6 * rng.next_f64();
            for _ in 0..12 {
                let c = if rng.next_f64() < share { cheap } else { slow };
                count[c] += 1;
                sum[c] += if c == cheap { 20 } else { 100 * MS };
            }
            if i > 20 {
                let mean = (sum[cheap] + sum[slow]) as f64 / 12.0;
                let expected = s.mean_for(&count).unwrap();
                worst = worst.max(mean / expected).max(expected / mean);
            }
            s.add(
                i * 300 * MS,
                &count,
                &sum,
                (i * 300 * MS).saturating_sub(30_000 * MS),
            );
        }
        assert!(
            worst < 1.01,
            "a window read {worst} times what its mix takes"
        );
        // The tier's service time is its routes' by their requests (about 30% cheap).
        let get = s.floors()[2].unwrap() as f64;
        assert!((55.0..85.0).contains(&(get / MS as f64)), "{get}");
    }

    #[test]
    fn log_normal_times_are_pooled_into_samples_whose_low_quantile_is_near_the_mean() {
        // One request per window, log-normal (σ 0.6): the 0.2 quantile of single requests
        // is about half their mean; of samples of 48, within a tenth of it.
        let mut s = ServiceFloor::default();
        let mut rng = SplitMix64::new(11);
        let (mut total, mut n) = (0.0, 0.0);
        for i in 1..=3000u64 {
            let z = rng.next_normal();
            let us = (20_000.0 * (0.6 * z).exp()) as u64;
            (total, n) = (total + us as f64, n + 1.0);
            let (mut count, mut sum) = ([0; CLASSES], [0; CLASSES]);
            count[class(0, 2)] = 1;
            sum[class(0, 2)] = us;
            s.add(i * 10 * MS, &count, &sum, 0);
        }
        let ratio = s.floors()[2].unwrap() as f64 / (total / n);
        assert!((0.88..1.0).contains(&ratio), "{ratio}");
    }

    #[test]
    fn a_burst_of_instant_answers_on_a_route_sits_below_the_quantile() {
        let mut s = ServiceFloor::default();
        for i in 1..=40 {
            s.add(
                i * 250 * MS,
                &on_one_route([0, 0, 32, 0]),
                &on_one_route([0, 0, 320 * MS, 0]),
                0,
            );
        }
        // An attacker's burst of requests on the same route answered at once.
        for i in 41..=43 {
            s.add(
                i * 250 * MS,
                &on_one_route([0, 0, 50, 0]),
                &on_one_route([0, 0, 500, 0]),
                0,
            );
        }
        let floor = s.floors()[2].unwrap() as f64;
        assert!(floor >= 0.95 * (10 * MS) as f64, "{floor}");
    }

    #[test]
    fn old_samples_age_out_but_a_class_keeps_its_newest() {
        let mut s = ServiceFloor::default();
        let get = |n: u64, ms: u64| on_one_route([0, 0, n * ms * MS, 0]);
        s.add(250 * MS, &on_one_route([0, 0, 64, 0]), &get(64, 50), 0);
        s.add(
            60_000 * MS,
            &on_one_route([0, 64, 0, 0]),
            &on_one_route([0, 64 * 100 * MS, 0, 0]),
            30_000 * MS,
        );
        assert_eq!(s.floors()[2], Some(50 * MS), "kept: nothing newer");
        s.add(
            61_000 * MS,
            &on_one_route([0, 0, 64, 0]),
            &get(64, 60),
            31_000 * MS,
        );
        assert_eq!(s.floors()[2], Some(60 * MS), "the old one aged out");
    }

    #[test]
    fn until_a_whole_sample_a_class_is_the_mean_of_what_it_has() {
        let mut s = ServiceFloor::default();
        s.add(
            250 * MS,
            &on_one_route([0, 0, 3, 0]),
            &on_one_route([0, 0, 90 * MS, 0]),
            0,
        );
        assert_eq!(s.floors()[2], Some(30 * MS));
        s.add(
            500 * MS,
            &on_one_route([0, 0, 1, 0]),
            &on_one_route([0, 0, 70 * MS, 0]),
            0,
        );
        assert_eq!(s.floors()[2], Some(40 * MS));
    }

    #[test]
    fn a_probe_replaces_the_floors_and_scales_the_classes_it_did_not_see() {
        let mut s = ServiceFloor::default();
        s.add(
            250 * MS,
            &on_one_route([1, 0, 10, 0]),
            &on_one_route([200 * MS, 0, 100 * MS, 0]),
            0,
        );
        // The server got twice as slow: the probe saw GETs only.
        s.reset(
            500 * MS,
            &on_one_route([0, 0, 4, 0]),
            &on_one_route([0, 0, 80 * MS, 0]),
            2.0,
        );
        assert_eq!(s.floors(), [Some(400 * MS), None, Some(20 * MS), None]);
    }
}
