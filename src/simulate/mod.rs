//! `brownout simulate`: Stripe's worker-utilization controller — the same [`Controller`],
//! [`probabilities`] and interval averaging the middleware runs on — in virtual time against a
//! fluid queueing model of a server ([`queue`]). Thousands of simulated seconds take
//! milliseconds, so an operator can try a setting before PATCHing it.
//!
//! The model: `workers` slots of `service_time` each (capacity C = workers ÷ service_time
//! requests a second) fed first come first served; the offered load by tier comes from a
//! profile ([`profile`]); the controller samples the in-flight count over `capacity` (the
//! `in_flight` source, averaged over each `sample_interval` from readings every 10 ms) and its
//! plan sheds each tier's arrivals with the published probability. Other limiters are not
//! modelled.

pub mod profile;
pub mod queue;
mod report;
pub mod settings;

pub use report::{csv, summary};

use crate::config::{Mode, WorkerUtilizationConfig};
use crate::control::{probabilities, Controller, ControllerParams, TimeAverage, OBSERVE_EVERY};
use crate::tier::Tier;
use profile::{Phase, Trace};
use queue::{Deadline, Server};
use std::time::Duration;

/// Where the offered load comes from.
#[derive(Debug, Clone)]
pub enum Load {
    /// Phases in multiples of the capacity, split by `Scenario::mix`.
    Phases(Vec<Phase>),
    /// Requests per second by tier, one row per second.
    Trace(Trace),
}

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Worker slots of the server.
    pub workers: u32,
    /// Mean seconds a request holds a worker.
    pub service_time: f64,
    /// Share of the offered load per tier (`Tier::ALL` order), for phases.
    pub mix: [f64; 4],
    /// The offered load.
    pub load: Load,
    /// Client deadline, if clients give up.
    pub deadline: Option<Deadline>,
}

impl Scenario {
    /// Requests per second the server can serve at its normal speed.
    pub fn capacity(&self) -> f64 {
        f64::from(self.workers) / self.service_time
    }

    /// The phases, a trace being one phase.
    fn phases(&self) -> Vec<Phase> {
        match &self.load {
            Load::Phases(p) => p.clone(),
            Load::Trace(rows) => vec![Phase {
                name: "trace".into(),
                seconds: rows.len() as f64,
                from: 0.0,
                to: 0.0,
                slowdown: 1.0,
            }],
        }
    }

    /// Offered requests per second by tier at `t` seconds into `phase` (which began at `start`).
    fn offered(&self, phase: &Phase, start: f64, t: f64) -> [f64; 4] {
        match &self.load {
            Load::Trace(rows) => rows[(t as usize).min(rows.len() - 1)],
            Load::Phases(_) => {
                let through = ((t - start) / phase.seconds).clamp(0.0, 1.0);
                let load = phase.from + (phase.to - phase.from) * through;
                self.mix.map(|share| load * self.capacity() * share)
            }
        }
    }
}

/// One simulated second.
#[derive(Debug, Clone, Default)]
pub struct Second {
    /// Its start.
    pub t: f64,
    /// Index of its phase.
    pub phase: usize,
    /// Requests offered, shed, started in time and timed out, by tier.
    pub offered: [f64; 4],
    /// See `offered`.
    pub shed: [f64; 4],
    /// See `offered`.
    pub succeeded: [f64; 4],
    /// See `offered`.
    pub timed_out: [f64; 4],
    /// Requests inside the app at its end.
    pub in_flight: f64,
    /// The controller's latest input, uncapped demand and amount, and the plan's drop
    /// probabilities.
    pub utilization: f64,
    /// See `utilization`.
    pub demand: f64,
    /// See `utilization`.
    pub amount: f64,
    /// See `utilization`.
    pub probability: [f64; 4],
}

/// What happened in one phase.
#[derive(Debug, Clone, Default)]
pub struct PhaseReport {
    /// Its name.
    pub name: String,
    /// When it started and how long it lasted, in seconds.
    pub start: f64,
    /// See `start`.
    pub seconds: f64,
    /// Requests offered per second, by tier.
    pub offered: [f64; 4],
    /// Share of the offered requests shed, and started within the deadline, by tier.
    pub shed: [f64; 4],
    /// See `shed`.
    pub success: [f64; 4],
    /// Median and 99th percentile latency of the requests started, by tier.
    pub p50: [Option<f64>; 4],
    /// See `p50`.
    pub p99: [Option<f64>; 4],
    /// Successes per second as a share of the capacity.
    pub goodput: f64,
    /// Mean controller input, and the largest demand it saw.
    pub mean_utilization: f64,
    /// See `mean_utilization`.
    pub max_demand: f64,
    /// The amount at the phase's end.
    pub amount_end: f64,
    /// Seconds from the phase's start to each tier's first shed request.
    pub first_shed: [Option<f64>; 4],
    /// Seconds from the phase's start until nothing was shed, when it started shedding.
    pub back_to_zero: Option<f64>,
    /// Times the amount turned from rising to falling or back.
    pub reversals: u32,
    /// Seconds in which a tier had requests shed while a lower one had successes.
    pub inversions: u32,
}

/// A run's results.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The server's capacity, requests per second.
    pub capacity: f64,
    /// The controller's thresholds, for charts.
    pub end_of_good: f64,
    /// See `end_of_good`.
    pub start_of_bad: f64,
    /// Every simulated second.
    pub seconds: Vec<Second>,
    /// Every phase.
    pub phases: Vec<PhaseReport>,
}

/// Latencies weighted by amount, in 2% buckets from 1 ms to 1000 s.
#[derive(Debug, Clone)]
struct Histogram([f64; 700]);

impl Histogram {
    const GROWTH: f64 = 1.02;

    fn add(&mut self, seconds: f64, amount: f64) {
        let i = ((seconds / 0.001).max(1.0).ln() / Self::GROWTH.ln()) as usize;
        self.0[i.min(self.0.len() - 1)] += amount;
    }

    /// The upper edge of the bucket holding quantile `q`; `None` when empty.
    fn quantile(&self, q: f64) -> Option<f64> {
        let total: f64 = self.0.iter().sum();
        if total <= 0.0 {
            return None;
        }
        let mut seen = 0.0;
        let i = self.0.iter().position(|&a| {
            seen += a;
            seen >= q * total
        })?;
        Some(0.001 * Self::GROWTH.powi(i as i32 + 1))
    }
}

/// Runs `scenario` under the worker-utilization settings `wu` (the plan sheds only when `wu`
/// enforces and the kill switch is off).
pub fn run(wu: &WorkerUtilizationConfig, kill_switch: bool, scenario: &Scenario) -> Outcome {
    let dt = OBSERVE_EVERY.as_secs_f64();
    let interval = wu.sample_interval.get().as_secs_f64();
    let enforced = wu.mode == Mode::Enforce && !kill_switch;
    let phases = scenario.phases();
    let total: f64 = phases.iter().map(|p| p.seconds).sum();
    let ticks = (total / dt).round() as u64;
    let mut controller = Controller::new(ControllerParams::from_config(wu), Duration::ZERO);
    let mut average = TimeAverage::default();
    let mut server = Server::new(scenario.workers, scenario.service_time);
    let (mut utilization, mut demand, mut probability) = (0.0, 0.0, [0.0; 4]);
    let mut amount = controller.amount();
    let mut next_sample = interval;
    let mut seconds: Vec<Second> = Vec::new();
    let mut reports: Vec<PhaseReport> = Vec::new();
    let mut log = PhaseLog::new(amount);
    let (mut phase, mut phase_start) = (0, 0.0);
    average.observe(Duration::ZERO, 0.0);
    for i in 0..ticks {
        let now = i as f64 * dt;
        while phase + 1 < phases.len() && now >= phase_start + phases[phase].seconds - 1e-9 {
            reports.push(close(&phases[phase], phase_start, &seconds, &log, scenario));
            phase_start += phases[phase].seconds;
            phase += 1;
            log = PhaseLog::new(amount);
        }
        let p = &phases[phase];
        if i % 100 == 0 {
            seconds.push(Second {
                t: now,
                phase,
                ..Second::default()
            });
        }
        let offered = scenario.offered(p, phase_start, now).map(|r| r * dt);
        let shed: [f64; 4] = std::array::from_fn(|t| offered[t] * probability[t]);
        let admitted: [f64; 4] = std::array::from_fn(|t| offered[t] - shed[t]);
        let mut record = |t: usize, a: f64, l: f64| log.latencies[t].add(l, a);
        let tick = server.tick(
            now,
            dt,
            admitted,
            p.slowdown,
            scenario.deadline,
            &mut record,
        );
        let reading = server.in_flight() / f64::from(wu.capacity.max(1));
        let end = now + dt;
        average.observe(Duration::from_secs_f64(end), reading);
        if end >= next_sample - 1e-9 {
            demand = average.take(Duration::from_secs_f64(end), reading);
            utilization = demand.min(1.0);
            amount = controller.update(utilization, Duration::from_secs_f64(end));
            let plan = probabilities(amount, wu);
            probability = Tier::ALL.map(|t| if enforced { plan.get(t) } else { 0.0 });
            log.samples.push((utilization, demand));
            log.amounts.push(amount);
            next_sample += interval;
        }
        let s = seconds.last_mut().expect("pushed at the first tick");
        for t in 0..4 {
            s.offered[t] += offered[t];
            s.shed[t] += shed[t];
            s.succeeded[t] += tick.succeeded[t];
            s.timed_out[t] += tick.timed_out[t];
        }
        s.in_flight = server.in_flight();
        (s.utilization, s.demand, s.amount, s.probability) =
            (utilization, demand, amount, probability);
    }
    reports.push(close(&phases[phase], phase_start, &seconds, &log, scenario));
    Outcome {
        capacity: scenario.capacity(),
        end_of_good: wu.end_of_good,
        start_of_bad: wu.start_of_bad,
        seconds,
        phases: reports,
    }
}

/// What the current phase collected besides its seconds.
struct PhaseLog {
    latencies: Vec<Histogram>,
    /// (utilization, demand) of each sample.
    samples: Vec<(f64, f64)>,
    /// The amount when the phase began, then after each sample.
    amounts: Vec<f64>,
}

impl PhaseLog {
    fn new(amount: f64) -> Self {
        Self {
            latencies: vec![Histogram([0.0; 700]); 4],
            samples: Vec::new(),
            amounts: vec![amount],
        }
    }
}

/// The report of the phase that began at `start`.
fn close(
    phase: &Phase,
    start: f64,
    seconds: &[Second],
    log: &PhaseLog,
    scenario: &Scenario,
) -> PhaseReport {
    let PhaseLog {
        latencies,
        samples,
        amounts,
    } = log;
    let mine: Vec<&Second> = seconds
        .iter()
        .filter(|s| s.t >= start - 1e-9 && s.t < start + phase.seconds - 1e-9)
        .collect();
    let sum = |f: fn(&Second) -> [f64; 4]| -> [f64; 4] {
        mine.iter()
            .fold([0.0; 4], |acc, s| std::array::from_fn(|t| acc[t] + f(s)[t]))
    };
    let (offered, shed, succeeded) = (sum(|s| s.offered), sum(|s| s.shed), sum(|s| s.succeeded));
    let share = |part: [f64; 4]| {
        std::array::from_fn(|t| {
            if offered[t] > 0.0 {
                part[t] / offered[t]
            } else {
                0.0
            }
        })
    };
    let shedding = |s: &Second| s.probability.iter().any(|&p| p > 0.0);
    let first_shed =
        std::array::from_fn(|t| mine.iter().find(|s| s.shed[t] > 0.0).map(|s| s.t - start));
    let back_to_zero = mine
        .first()
        .filter(|s| shedding(s))
        .and_then(|_| mine.iter().find(|s| !shedding(s)))
        .map(|s| s.t - start);
    let deltas: Vec<f64> = amounts
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| d.abs() > 1e-12)
        .collect();
    let reversals = deltas
        .windows(2)
        .filter(|w| w[0].signum() != w[1].signum())
        .count() as u32;
    let inversions = mine
        .iter()
        .filter(|s| {
            (0..4).any(|hi| s.shed[hi] > 1e-9 && (hi + 1..4).any(|lo| s.succeeded[lo] > 1e-9))
        })
        .count() as u32;
    let n = samples.len().max(1) as f64;
    PhaseReport {
        name: phase.name.clone(),
        start,
        seconds: phase.seconds,
        offered: offered.map(|o| o / phase.seconds),
        shed: share(shed),
        success: share(succeeded),
        p50: std::array::from_fn(|t| latencies[t].quantile(0.5)),
        p99: std::array::from_fn(|t| latencies[t].quantile(0.99)),
        goodput: succeeded.iter().sum::<f64>() / phase.seconds / scenario.capacity(),
        mean_utilization: samples.iter().map(|s| s.0).sum::<f64>() / n,
        max_demand: samples.iter().map(|s| s.1).fold(0.0, f64::max),
        amount_end: *amounts.last().unwrap_or(&0.0),
        first_shed,
        back_to_zero,
        reversals,
        inversions,
    }
}

#[cfg(test)]
mod tests;
