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
//! in: a refused request's route is not known, its tier is), counted with a decay of
//! [`MIX_DECAY_US`] whether the class had requests or not: a tier the controller sheds keeps
//! the mix it had. (Weighted by the requests behind each floor instead, a rare dear route
//! that keeps its last sample came to weigh as much as a cheap one beside it once the tier
//! was shed: on an app of 1 ms cache hits, 20 ms reads and 300 ms reports, its GETs read
//! twice their cost, and the capacity learned against them a third low.)

use crate::route_class::{tier_index, CLASSES};
use std::collections::VecDeque;

/// The count-weighted quantile of sample means that stands for a class's service time.
pub const FLOOR_QUANTILE: f64 = 0.2;

/// Requests pooled into one sample of a class.
pub const SAMPLE_REQUESTS: u64 = 48;

/// Requests a class's service time must stand on before windows that look queued against
/// it are left out of it ([`ServiceFloor::settled`]).
pub const SETTLE_REQUESTS: u64 = 16;

/// How many times its mean latency so far a class's first requests are only a warm-up: the
/// requests to finish first after a route starts to be served are its fastest (a slow one
/// let in at the same moment finishes later), so their mean is low, and a floor settled on
/// it reads every later window as a queue and leaves it out: nothing corrects it. On 100
/// workers of 500 ms (times spread log-normally, σ 0.5), the first sixteen of each class to
/// finish read 317 ms for the critical route's 566 ms mean, the app's capacity was learned at
/// 38 of its 100 workers at half its capacity, and the limit fell to 4 at 0.75 of it. Once
/// this many times the mean of what came so far has passed since the class's first requests
/// finished (by then a request as slow as four times that is rare), what was pooled is
/// dropped and the class is learned afresh; until then its time is that mean, not settled.
pub const WARMUP: f64 = 4.0;

/// The time constant (µs) of the decay of each class's share of its tier.
pub const MIX_DECAY_US: f64 = 30e6;

/// Most samples kept per class.
const MAX_KEPT: usize = 256;

/// One class's samples: (end µs, mean latency µs, requests), and the requests pooled since.
#[derive(Debug, Clone, Default)]
struct Class {
    samples: VecDeque<(u64, u64, u64)>,
    /// Requests and the sum of their latencies (µs) not yet a whole sample.
    pending: (u64, u64),
    floor: Option<u64>,
    /// Its recent requests, decayed over [`MIX_DECAY_US`].
    mix: f64,
    /// Where its warm-up is ([`WARMUP`]).
    stage: Stage,
}

/// A class's warm-up ([`WARMUP`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Stage {
    /// None of its requests finished yet.
    #[default]
    Cold,
    /// Its first requests finished in the window that ended then (µs).
    Warming(u64),
    /// Over: its samples stand for it.
    Warm,
}

impl Class {
    /// Requests behind its floor (its weight in its tier's mix).
    fn weight(&self) -> u64 {
        self.samples.iter().map(|&(_, _, n)| n).sum::<u64>() + self.pending.0
    }

    /// Ends the warm-up at `at` (µs) once [`WARMUP`] times the mean of what came has passed:
    /// what was pooled is dropped (its floor stays until new requests replace it).
    fn warm_up(&mut self, at: u64) {
        let Stage::Warming(first) = self.stage else {
            return;
        };
        let (n, s) = self.pending;
        let mean = s.checked_div(n).unwrap_or(0) as f64;
        if n > 0 && at.saturating_sub(first) as f64 >= WARMUP * mean {
            self.stage = Stage::Warm;
            self.samples.clear();
            self.pending = (0, 0);
        }
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
    /// When the mix was last counted (µs).
    counted: Option<u64>,
}

impl Default for ServiceFloor {
    fn default() -> Self {
        Self {
            classes: vec![Class::default(); CLASSES],
            tiers: [None; 4],
            counted: None,
        }
    }
}

impl ServiceFloor {
    /// Adds one window's requests (`count[c]` requests of class `c` whose latencies sum to
    /// `sum[c]` µs), dropping samples older than `keep_from` (but a class's newest).
    pub fn add(&mut self, at: u64, count: &[u64; CLASSES], sum: &[u64; CLASSES], keep_from: u64) {
        let since = at.saturating_sub(self.counted.unwrap_or(at));
        self.counted = Some(at.max(self.counted.unwrap_or(0)));
        let decay = (-(since as f64) / MIX_DECAY_US).exp();
        for (c, class) in self.classes.iter_mut().enumerate() {
            class.mix = class.mix * decay + count[c] as f64;
            class.warm_up(at);
            if count[c] > 0 {
                if class.stage == Stage::Cold {
                    class.stage = Stage::Warming(at);
                }
                let (n, s) = &mut class.pending;
                *n += count[c];
                *s = s.saturating_add(sum[c]);
                if *n >= SAMPLE_REQUESTS && class.stage == Stage::Warm {
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

    /// Replaces the floor of every class with [`SETTLE_REQUESTS`] requests or more in
    /// `count` by what `count` and `sum` measured (a probe at low concurrency); every other
    /// class is scaled by how much slower the window's requests got (`ratio`: measured over
    /// expected). No floor falls below `fall` times what it was (1: none falls; 0: no bound).
    ///
    /// A probe's window counts the requests that finished in it, and a slow request let in
    /// late in it finishes after: with times spread log-normally its few requests of a slow
    /// route are its fastest (a mixed app's 100 ms route measured at 44 ms on three of them),
    /// and every later window then read as a queue against that floor.
    pub fn reset(
        &mut self,
        at: u64,
        (count, sum): (&[u64; CLASSES], &[u64; CLASSES]),
        ratio: f64,
        fall: f64,
    ) {
        for (c, class) in self.classes.iter_mut().enumerate() {
            class.mix += count[c] as f64;
            let lowest = class.floor.map_or(0, |f| (f as f64 * fall) as u64);
            if let Some(mean) = sum[c]
                .checked_div(count[c])
                .filter(|_| count[c] >= SETTLE_REQUESTS)
            {
                class.samples.clear();
                class.samples.push_back((at, mean.max(lowest), count[c]));
                class.pending = (0, 0);
            } else if ratio.is_finite() && ratio > 0.0 {
                let ratio = ratio.max(fall);
                for e in &mut class.samples {
                    e.1 = (e.1 as f64 * ratio) as u64;
                }
                class.pending.1 = (class.pending.1 as f64 * ratio) as u64;
                class.floor = class.floor.map(|f| (f as f64 * ratio) as u64);
            }
            // Measured on purpose (or scaled by what was): no warm-up left to wait for.
            if class.floor.is_some() || !class.samples.is_empty() {
                class.stage = Stage::Warm;
            }
            class.settle();
        }
        self.settle_tiers();
    }

    fn settle_tiers(&mut self) {
        let mut work = [0f64; 4];
        let mut weight = [0f64; 4];
        for (c, class) in self.classes.iter().enumerate() {
            if let Some(f) = class.floor {
                // A class with no requests counted yet weighs next to nothing beside those
                // with some, and as much as the others without.
                let n = class.mix.max(f64::MIN_POSITIVE);
                work[tier_index(c)] += f as f64 * n;
                weight[tier_index(c)] += n;
            }
        }
        for t in 0..4 {
            if weight[t] > 0.0 {
                self.tiers[t] = Some((work[t] / weight[t]).round() as u64);
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
    /// that finished first, the fastest of a slow route. Nor before its warm-up is over
    /// ([`WARMUP`]): the first sixteen to finish are the fastest too.
    pub fn settled(&self, c: usize) -> bool {
        let class = &self.classes[c];
        class.stage == Stage::Warm && class.weight() >= SETTLE_REQUESTS
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

    /// What a request costs on average (µs) in the recent mix of classes: each class at its
    /// floor, weighed by its recent requests; `None` before any floor.
    pub fn mix_mean(&self) -> Option<f64> {
        let (n, s1, _) = self.moments();
        (n > 0.0 && s1 > 0.0).then(|| s1 / n)
    }

    /// The recent requests (each class's weighed), and the sums of their service times and of
    /// the squares of those (µs), each class at its floor.
    fn moments(&self) -> (f64, f64, f64) {
        let (mut n, mut s1, mut s2) = (0.0, 0.0, 0.0);
        for class in &self.classes {
            if let Some(f) = class.floor {
                let f = f as f64;
                n += class.mix;
                s1 += class.mix * f;
                s2 += class.mix * f * f;
            }
        }
        (n, s1, s2)
    }

    /// The squared coefficient of variation of the recent requests' service times, each class
    /// at its own and weighed by its recent requests (0: one time on every route; 8.4: a
    /// tenth 300 ms reports, the rest 1 ms cache hits). The spread within a class is not
    /// counted.
    pub fn spread(&self) -> f64 {
        let (n, s1, s2) = self.moments();
        if n <= 0.0 || s1 <= 0.0 {
            return 0.0;
        }
        (s2 * n / (s1 * s1) - 1.0).max(0.0)
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
#[path = "service_tests.rs"]
mod tests;
