//! adaptive_concurrency (the fast guard) as flows, for the simulator: the same learned limit
//! (`AdaptiveLimit`, fed each window with the latencies of the requests the app started)
//! and the same critical share (`critical_share`) the middleware runs on, and the rules of
//! its admission: each tier's share of the limit counting the tiers above it, critical
//! requests counted and refused only past `critical_ceiling` times the limit (outside the
//! admitted share of cohorts first), the waiting room (`queue`, `max_wait`, `post_max_wait`;
//! a freed slot goes to the highest tier waiting, a request that has to wait goes ahead of
//! the lower tiers waiting and takes the places of the newest of the lowest tier when the
//! room is full), `tier_hold` after a refusal, and the lane. Amounts are real numbers. A
//! refusal holds the lower tiers off each time a tier's refusals add up to a whole request
//! (the first at half of one), as on the real server; a window binds when at least half a
//! request was refused or made to wait in it.

use crate::config::AdaptiveConcurrencyConfig;
use crate::limiter::adaptive_concurrency::params;
use crate::math::adaptive::{AdaptiveLimit, Window};
use crate::math::capacity::{lane_waits, CapacityEstimate};
use crate::math::critical::{ceiling, critical_share, CeilingBase, CriticalPressure};
use crate::rng::SplitMix64;
use crate::route_class::CLASSES;
use crate::tier::Tier;
use std::collections::VecDeque;

/// Amounts below this are rounding dust.
const DUST: f64 = 1e-9;

/// What one tick's admission did.
#[derive(Debug, Default, Clone)]
pub struct TickResult {
    /// Let into the app, by tier, with how long each amount waited first (seconds).
    pub admitted: Vec<([f64; 4], f64)>,
    /// Refused, by tier.
    pub refused: [f64; 4],
}

/// What the current window has seen.
#[derive(Debug, Default, Clone)]
struct Sums {
    /// Per route class (`RouteClass::index`; empty until one is seen): the amount finished.
    count: Vec<f64>,
    /// Per route class: Σ amount × latency (s).
    sum: Vec<f64>,
    /// Lowest latency (s).
    min: Option<f64>,
    /// Requests refused or made to wait.
    held_back: f64,
    /// Requests refused.
    refused: f64,
    overflowed: bool,
    at_limit: bool,
}

/// The fast guard's state.
#[derive(Debug, Clone)]
pub struct FastGuard {
    c: AdaptiveConcurrencyConfig,
    enforced: bool,
    limit: AdaptiveLimit,
    capacity: CapacityEstimate,
    next_window: f64,
    /// Per tier: until when it is held off (s).
    held_until: [f64; 4],
    /// Until when a refusal is recent (no last look before).
    refusing_until: f64,
    /// Per tier: amount refused since its last hold, towards the next whole request.
    toward_hold: [f64; 4],
    /// Per tier (critical's unused): (arrived, amount) waiting, oldest first.
    room: [VecDeque<(f64, f64)>; 4],
    critical_share: f64,
    /// What the critical ceiling is a multiple of.
    ceiling: CeilingBase,
    ceiling_base: f64,
    window: Sums,
    /// The spread of single requests' times (their coefficient of variation) and the draws
    /// that give a window's mean per class its sampling noise (`None`: the mean itself).
    noise: Option<(f64, SplitMix64)>,
    /// Whether the lane is on (`lane_on`), as of the controller's last step.
    lane_on: bool,
}

fn micros(seconds: f64) -> u64 {
    (seconds * 1e6).round().max(0.0) as u64
}

impl FastGuard {
    /// The guard of `c` at time 0; it refuses only when `enforced` (else it lets everything
    /// in and only learns, as in dark mode).
    pub fn new(c: &AdaptiveConcurrencyConfig, enforced: bool) -> Self {
        Self {
            c: c.clone(),
            enforced,
            limit: AdaptiveLimit::new(params(c), f64::from(c.initial_limit), 0),
            capacity: CapacityEstimate::default(),
            next_window: c.window.get().as_secs_f64(),
            held_until: [0.0; 4],
            refusing_until: 0.0,
            toward_hold: [0.5; 4],
            room: Default::default(),
            critical_share: 1.0,
            ceiling: CeilingBase::default(),
            ceiling_base: f64::from(c.initial_limit),
            window: Sums::default(),
            noise: None,
            lane_on: false,
        }
    }

    /// Each window's mean per class drawn around the flow's by `cv ÷ √requests` (seeded; `cv`
    /// the requests' coefficient of variation): a window of a few log-normal requests is
    /// often slower or faster than its class by chance, and the real limit learns from them.
    pub fn with_noise(mut self, cv: f64, seed: u64) -> Self {
        if cv > 0.0 {
            self.noise = Some((cv, SplitMix64::new(seed)));
        }
        self
    }

    /// `hold`: quiet windows leave the limit where it is; `lane` (`lane_on`): the lower
    /// tiers are let in under the lane; as in the middleware's sampler.
    pub fn set_hold(&mut self, hold: bool, lane: bool) {
        self.limit.set_hold(hold);
        self.lane_on = lane;
    }

    /// The limit requests are admitted under.
    pub fn limit(&self) -> f64 {
        self.limit.limit()
    }

    /// The lower tiers': the limit, or the lane where it is below (`CapacityEstimate::lane`).
    fn lower(&self) -> f64 {
        self.limit()
            .min(self.capacity.lane(self.lane_on, self.ceiling.in_time()))
    }

    /// The service time learned per tier (seconds), once one was seen: what the middleware
    /// publishes for the controller's reading of demand.
    pub fn tier_floors(&self) -> [Option<f64>; 4] {
        (self.limit.service().floors()).map(|f| f.map(|us| us as f64 / 1e6))
    }

    /// The app's capacity learned (requests at once), once it was seen saturated, as the
    /// middleware's sampler learns it.
    pub fn capacity(&self) -> Option<f64> {
        self.capacity.learned()
    }

    /// The share of critical cohorts admitted.
    pub fn critical_share(&self) -> f64 {
        self.critical_share
    }

    /// Requests waiting for room.
    pub fn waiting(&self) -> f64 {
        self.room.iter().flatten().map(|&(_, a)| a).sum()
    }

    /// Admits `arriving` (by tier) at `now`, with `in_flight` (by tier) inside the app: first
    /// the waiting room (what ran out of time refused, then the free room to the highest tier
    /// waiting), then the arrivals, critical first.
    pub fn admit(&mut self, now: f64, arriving: [f64; 4], in_flight: [f64; 4]) -> TickResult {
        let mut out = TickResult::default();
        if !self.enforced {
            out.admitted.push((arriving, 0.0));
            return out;
        }
        let mut in_flight = in_flight;
        self.expire(now, &mut in_flight, &mut out);
        self.dispatch(now, &mut in_flight, &mut out);
        let mut fresh = [0.0; 4];
        fresh[0] = self.admit_critical(now, arriving[0], &in_flight, &mut out);
        in_flight[0] += fresh[0];
        for tier in [Tier::Post, Tier::Get, Tier::Test] {
            let t = tier.index();
            let amount = arriving[t];
            if amount <= DUST {
                continue;
            }
            // Held off while the app is still busy, as in the middleware: once fewer than
            // half the tier's limit are in flight, the hold lifts.
            if now < self.held_until[t] && self.busy(tier, &in_flight) {
                self.refuse(now, t, amount, &mut out);
                continue;
            }
            let waiting_above = (1..=t).any(|u| !self.room[u].is_empty());
            let direct = if waiting_above {
                0.0
            } else {
                amount.min(self.room_for(tier, &in_flight))
            };
            fresh[t] = direct;
            in_flight[t] += direct;
            let rest = amount - direct;
            if rest <= DUST {
                continue;
            }
            if self.c.queue == 0 {
                self.refuse(now, t, rest, &mut out);
                continue;
            }
            // Whoever has to wait goes ahead of the lower tiers waiting, and takes the places
            // of the newest of the lowest tier when the room is full.
            let space = (f64::from(self.c.queue) - self.waiting()).max(0.0);
            let mut short = rest - space;
            for lower in (t + 1..4).rev() {
                while short > DUST {
                    let Some(back) = self.room[lower].back_mut() else {
                        break;
                    };
                    let turned = back.1.min(short);
                    back.1 -= turned;
                    if back.1 <= DUST {
                        self.room[lower].pop_back();
                    }
                    short -= turned;
                    self.refuse(now, lower, turned, &mut out);
                }
            }
            let space = (f64::from(self.c.queue) - self.waiting()).max(0.0);
            let waits = rest.min(space);
            if waits > DUST {
                self.room[t].push_back((now, waits));
                self.window.held_back += waits;
            }
            self.refuse(now, t, rest - waits, &mut out);
        }
        out.admitted.push((fresh, 0.0));
        out
    }

    /// Critical arrivals: those outside the admitted share of cohorts refused, the rest let in
    /// up to `critical_ceiling` × the limit in flight, at most the cap. Returns what got in.
    fn admit_critical(
        &mut self,
        now: f64,
        amount: f64,
        in_flight: &[f64; 4],
        out: &mut TickResult,
    ) -> f64 {
        if amount <= DUST {
            return 0.0;
        }
        if self.c.critical_ceiling <= 0.0 {
            return amount;
        }
        let outside = amount * (1.0 - self.critical_share);
        self.refuse(now, 0, outside, out);
        let amount = amount - outside;
        let limit = self.limit();
        let before: f64 = in_flight.iter().sum();
        // Not lowered by a probe's min_limit or a fall faster than what got in drains.
        let (base, cap) = (self.ceiling_base, self.ceiling.cap());
        let ceiling = ceiling(limit, base, self.c.critical_ceiling, cap)
            .floor()
            .max(1.0);
        let admitted = amount.min((ceiling - before).max(0.0));
        if amount - admitted > DUST {
            self.window.overflowed = true;
            self.refuse(now, 0, amount - admitted, out);
        }
        if admitted > DUST && before + admitted > limit {
            self.window.at_limit = true;
        }
        admitted
    }

    /// `tier`'s share of the limit.
    fn share(&self, tier: Tier) -> f64 {
        self.c
            .tier_limit(self.lower(), tier)
            .unwrap_or_else(|| self.lower())
    }

    /// Room for one more amount of `tier` under its share, counting the tiers above it.
    fn room_for(&self, tier: Tier, in_flight: &[f64; 4]) -> f64 {
        let above: f64 = in_flight[..=tier.index()].iter().sum();
        (self.share(tier).floor().max(1.0) - above).max(0.0)
    }

    /// Whether `tier` and those above it hold at least half its share (a hold applies).
    fn busy(&self, tier: Tier, in_flight: &[f64; 4]) -> bool {
        let above: f64 = in_flight[..=tier.index()].iter().sum();
        above >= self.share(tier) / 2.0
    }

    /// What waited past its tier's longest wait: refused, or let in as the middleware's
    /// `Wait::last_look` lets it in.
    fn expire(&mut self, now: f64, in_flight: &mut [f64; 4], out: &mut TickResult) {
        let whole = self.lower().floor().max(1.0);
        for tier in [Tier::Post, Tier::Get, Tier::Test] {
            let t = tier.index();
            let max_wait = self.c.max_wait_for(tier).as_secs_f64();
            while let Some(&(arrived, amount)) = self.room[t].front() {
                if now - arrived < max_wait - 1e-9 {
                    break;
                }
                self.room[t].pop_front();
                let waiting_above: f64 = self.room[1..t].iter().flatten().map(|w| w.1).sum();
                let ahead = in_flight[..=t].iter().sum::<f64>() + waiting_above;
                let taken = if now < self.refusing_until {
                    0.0
                } else {
                    amount.min((whole - ahead).max(0.0))
                };
                if taken > DUST {
                    in_flight[t] += taken;
                    let mut admitted = [0.0; 4];
                    admitted[t] = taken;
                    out.admitted.push((admitted, now - arrived));
                }
                self.refuse(now, t, amount - taken, out);
            }
        }
    }

    /// Gives the free room to the requests waiting, highest tier first, oldest first; a tier
    /// without room leaves none for the tiers below it.
    fn dispatch(&mut self, now: f64, in_flight: &mut [f64; 4], out: &mut TickResult) {
        for tier in [Tier::Post, Tier::Get, Tier::Test] {
            let t = tier.index();
            while let Some(&(arrived, amount)) = self.room[t].front() {
                let room = self.room_for(tier, in_flight);
                if room <= DUST {
                    return;
                }
                let taken = amount.min(room);
                let front = self.room[t].front_mut().expect("looked at above");
                front.1 -= taken;
                in_flight[t] += taken;
                let mut admitted = [0.0; 4];
                admitted[t] = taken;
                out.admitted.push((admitted, now - arrived));
                if front.1 <= DUST {
                    self.room[t].pop_front();
                }
            }
        }
    }

    /// Refuses `amount` of tier `t`: each whole request refused holds every lower tier off for
    /// `tier_hold`.
    fn refuse(&mut self, now: f64, t: usize, amount: f64, out: &mut TickResult) {
        if amount <= DUST {
            return;
        }
        out.refused[t] += amount;
        self.window.held_back += amount;
        self.window.refused += amount;
        self.toward_hold[t] += amount;
        if self.toward_hold[t] >= 1.0 {
            self.toward_hold[t] = self.toward_hold[t].fract();
            let until = now + self.c.tier_hold.get().as_secs_f64();
            for lower in &mut self.held_until[t + 1..] {
                *lower = lower.max(until);
            }
            self.refusing_until = self.refusing_until.max(until);
        }
    }

    /// Notes requests of route class `class` the app started, each taking `in_app` seconds
    /// inside it.
    pub fn started(&mut self, class: usize, amount: f64, in_app: f64) {
        if amount <= DUST {
            return;
        }
        let w = &mut self.window;
        if w.count.is_empty() {
            w.count = vec![0.0; CLASSES];
            w.sum = vec![0.0; CLASSES];
        }
        w.count[class] += amount;
        w.sum[class] += amount * in_app;
        w.min = Some(w.min.map_or(in_app, |m| m.min(in_app)));
    }

    /// Notes the app's state after a tick: `queued` requests waiting for one of `workers`
    /// that serve a request in `service` seconds. A fluid queue never empties while it is fed
    /// faster than it drains, but random arrivals do: while fewer requests wait than there are
    /// workers, some request of a window finds a worker free and takes only the service time
    /// (on the real server that request confirms the floor).
    pub fn app(&mut self, queued: f64, workers: f64, service: f64) {
        if self.window.count.iter().sum::<f64>() > DUST && queued <= workers {
            let w = &mut self.window;
            w.min = Some(w.min.map_or(service, |m| m.min(service)));
        }
    }

    /// Closes the window if it is over at `now`: the limit learns from it and the critical
    /// share moves by what critical requests met in it.
    pub fn end_of_tick(&mut self, now: f64, in_flight: f64) {
        if now < self.next_window - 1e-9 {
            return;
        }
        self.next_window +=
            self.limit.period(micros(self.c.window.get().as_secs_f64())) as f64 / 1e6;
        let w = std::mem::take(&mut self.window);
        let mut window = Window {
            at: micros(now),
            min: w.min.map_or(u64::MAX, micros),
            // Whole requests: binding once half of one was held back.
            refused: w.refused.round().max(0.0) as u64,
            waited: (w.held_back.round() - w.refused.round()).max(0.0) as u64,
            in_flight: in_flight.round().max(0.0) as u64,
            ..Window::default()
        };
        // Whole requests, as the middleware counts (at least one once any finished), split
        // over the classes by the largest remainders.
        let total: f64 = w.count.iter().sum();
        if total > DUST {
            let whole = total.round().max(1.0);
            let exact: Vec<f64> = w.count.iter().map(|c| c / total * whole).collect();
            let mut left = whole - exact.iter().map(|e| e.floor()).sum::<f64>();
            let mut order: Vec<usize> = (0..exact.len()).filter(|&c| exact[c] > 0.0).collect();
            order.sort_by(|&a, &b| exact[b].fract().total_cmp(&exact[a].fract()));
            for c in order {
                let mut n = exact[c].floor();
                if left >= 1.0 {
                    n += 1.0;
                    left -= 1.0;
                }
                if n > 0.0 {
                    let mut mean = w.sum[c] / w.count[c];
                    if let Some((cv, rng)) = self.noise.as_mut() {
                        let z = crate::rng::normal(rng.next_f64(), rng.next_f64());
                        mean *= (1.0 + *cv / n.sqrt() * z).max(0.1);
                    }
                    window.count[c] = n as u64;
                    window.sum[c] = micros(mean * n);
                }
            }
        }
        lane_waits(&mut window, self.lower(), self.limit());
        self.capacity
            .learn(&mut self.limit, params(&self.c), window);
        let known = self.capacity.known(&self.limit, self.c.critical_ceiling);
        self.ceiling_base = self.ceiling.update(&window, self.limit.learned(), known);
        if self.enforced && self.c.critical_ceiling > 0.0 {
            let pressure = match (w.overflowed, w.at_limit) {
                (true, _) => CriticalPressure::Overflowed,
                (false, true) => CriticalPressure::AtLimit,
                (false, false) => CriticalPressure::Clear,
            };
            self.critical_share = critical_share(self.critical_share, pressure);
        }
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
