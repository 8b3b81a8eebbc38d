//! `brownout simulate`: Stripe's worker-utilization controller and adaptive_concurrency (the
//! fast guard) — the same `Controller`, `probabilities`, interval averaging and demand
//! reading (`offered_work`), and the same learned limit and critical share the middleware
//! runs on — in virtual time against a fluid queueing model of a server ([`queue`]).
//! Thousands of simulated seconds take milliseconds, so an operator can try a setting before
//! PATCHing it.
//!
//! The model: `workers` slots fed first come first served, each request holding one for its
//! route's mean time (one route of `service_time`, or the scenario's `routes`, their times
//! spread log-normally by its `spread`; capacity C = workers ÷ the mix's mean time
//! requests a second); the offered load by tier comes from a
//! profile ([`profile`]); the controller's plan sheds each tier's arrivals with the published
//! probability; what passes goes through the fast guard ([`guard`]: its limit, tier shares,
//! waiting room, hold and critical ceiling) when the config runs it, and into the app. The
//! controller samples the `in_flight` source as the middleware does: the requests that came
//! past it, each counted for the fast guard's floor latency, over `capacity` (without the
//! fast guard, the in-flight count averaged over each `sample_interval`). request_rate,
//! concurrent_requests and fleet_usage are not modelled.

pub mod guard;
mod phase;
pub mod profile;
pub mod queue;
mod report;
pub mod settings;

pub use report::{csv, summary, PhaseReport, RunReport, Second};

use crate::config::{LimitersConfig, Mode};
use crate::control::{offered_work, with_shed, Controller, TimeAverage, Traffic, OBSERVE_EVERY};
use crate::math::capacity::lane_on;
use crate::rng::SplitMix64;
use crate::route_class::RouteClass;
use crate::tier::Tier;
use guard::FastGuard;
use phase::{close, PhaseLog};
use profile::{Phase, Trace};
use queue::{ClientDeadline, Server};
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
    pub deadline: Option<ClientDeadline>,
    /// Seconds a request spends in the app outside a worker (the framework, the network):
    /// the latency the fast guard measures (and its floor) includes it, the capacity does not.
    pub overhead: f64,
    /// Arrivals: `Some(seed)` draws each tier's arrivals in each tick from a Poisson
    /// distribution of the offered rate (seeded: the same seed, the same run), so the workers
    /// see the bursts and gaps of independent clients and idle in the gaps as a real server
    /// does; `None` offers exactly the rate every tick (a pure flow).
    pub poisson: Option<u64>,
    /// The app's routes, each with its mean time and the share of each tier's requests it
    /// takes; empty: one route of `service_time` (which routes, when given, replace: the
    /// mean is then their mix's).
    pub routes: Vec<Route>,
    /// σ of the log-normal each request's time is drawn from around its route's mean (its
    /// mean kept; 0: every request takes its route's mean): what the fast guard and the
    /// latency quantiles see.
    pub spread: f64,
    /// The share of all arrivals more, with the mix keeping its rate, on a path the app
    /// answers at once without a worker (GET requests, as `bench overload --app ...+cheap`
    /// sends): shed and admitted like any GET, learned by the fast guard as their own class,
    /// and left out of the reports.
    pub cheap: f64,
    /// How a phase's `slowdown` takes capacity away: `false`, every request takes that many
    /// times longer; `true`, that many times fewer workers serve (as they free), each
    /// request's time unchanged (`demo.capacity_drop: fewer`).
    pub fewer_workers: bool,
}

/// The workers left of `workers` when a capacity drop of `drop` times takes whole workers
/// away, as the demo does (`demo.capacity_drop: fewer`): `1 - 1/drop` of them, rounded down
/// (a drop of 2 leaves 3 of 5 workers, and all of 1).
pub fn kept_workers(workers: f64, drop: f64) -> f64 {
    let drop = drop.max(1.0);
    workers - (workers * (1.0 - 1.0 / drop)).floor()
}

/// One of the app's routes, for the model.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Its mean time (seconds).
    pub time: f64,
    /// The share of each tier's requests it takes (`Tier::ALL` order; each tier's shares
    /// over the routes sum to 1).
    pub share: [f64; 4],
}

/// How many latencies one started amount is spread over (the log-normal's octiles).
const SPREAD_BINS: usize = 8;

/// The standard normal's quantiles at the midpoints of [`SPREAD_BINS`] equal slices.
const NORMAL_OCTILES: [f64; SPREAD_BINS] = [
    -1.534_120_5,
    -0.887_146_6,
    -0.488_776_4,
    -0.157_310_6,
    0.157_310_6,
    0.488_776_4,
    0.887_146_6,
    1.534_120_5,
];

/// A request's time over its route's mean at each of [`SPREAD_BINS`] equally likely slices
/// of a log-normal of σ `spread`, scaled so that their mean is 1.
fn spread_factors(spread: f64) -> [f64; SPREAD_BINS] {
    let raw = NORMAL_OCTILES.map(|z| (spread * z).exp());
    let mean = raw.iter().sum::<f64>() / SPREAD_BINS as f64;
    raw.map(|f| f / mean)
}

/// A Poisson draw of mean `mean` (Knuth's product of uniforms; a normal approximation for a
/// large mean).
fn poisson(rng: &mut SplitMix64, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    if mean > 30.0 {
        // Box-Muller.
        let (u, v) = (rng.next_f64().max(f64::MIN_POSITIVE), rng.next_f64());
        let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
        return (mean + z * mean.sqrt()).round().max(0.0);
    }
    let limit = (-mean).exp();
    let (mut k, mut product) = (0.0, rng.next_f64());
    while product > limit {
        k += 1.0;
        product *= rng.next_f64();
    }
    k
}

impl Scenario {
    /// Requests per second the server can serve at its normal speed (the mix's).
    pub fn capacity(&self) -> f64 {
        f64::from(self.workers) / self.mean_service()
    }

    /// The routes: those given, or one of `service_time`.
    fn routes(&self) -> std::borrow::Cow<'_, [Route]> {
        if self.routes.is_empty() {
            std::borrow::Cow::Owned(vec![Route {
                time: self.service_time,
                share: [1.0; 4],
            }])
        } else {
            std::borrow::Cow::Borrowed(&self.routes)
        }
    }

    /// The mean time of a request of each tier (seconds).
    pub fn tier_times(&self) -> [f64; 4] {
        let routes = self.routes();
        std::array::from_fn(|t| routes.iter().map(|r| r.share[t] * r.time).sum())
    }

    /// The mean time of a request of the mix (seconds).
    pub fn mean_service(&self) -> f64 {
        let times = self.tier_times();
        let total: f64 = self.mix.iter().sum();
        if total <= 0.0 {
            return self.service_time;
        }
        self.mix.iter().zip(times).map(|(m, t)| m * t).sum::<f64>() / total
    }

    /// The share of the GET requests reaching brownout that go to the cheap path.
    fn cheap_share(&self) -> f64 {
        let cheap = self.cheap.clamp(0.0, 0.9);
        let per_mix = cheap / (1.0 - cheap);
        let get = self.mix[Tier::Get.index()] / self.mix.iter().sum::<f64>().max(1e-12);
        if per_mix <= 0.0 {
            0.0
        } else {
            per_mix / (get + per_mix)
        }
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
                let mut rates = self.mix.map(|share| load * self.capacity() * share);
                // The cheap path's GETs on top of the mix's.
                rates[Tier::Get.index()] /= 1.0 - self.cheap_share();
                rates
            }
        }
    }
}

/// Runs `scenario` under `limiters`: worker_utilization's plan sheds only when it enforces
/// and the kill switch is off; adaptive_concurrency is modelled unless it is off, and refuses
/// only when it enforces and the kill switch is off (else it only learns its floor).
pub fn run(limiters: &LimitersConfig, kill_switch: bool, scenario: &Scenario) -> RunReport {
    let wu = &limiters.worker_utilization;
    let ac = &limiters.adaptive_concurrency;
    let dt = OBSERVE_EVERY.as_secs_f64();
    let interval = wu.sample_interval.get().as_secs_f64();
    let enforced = wu.mode == Mode::Enforce && !kill_switch;
    let mut guard = (ac.mode != Mode::Off).then(|| {
        // Each request's time spread log-normally: a window's mean varies with it.
        let cv = ((scenario.spread * scenario.spread).exp() - 1.0).sqrt();
        FastGuard::new(ac, ac.mode == Mode::Enforce && !kill_switch)
            .with_noise(cv, scenario.poisson.unwrap_or(0) ^ 0x5EED)
    });
    // Pinned, or learned by the fast guard's model as the middleware learns it.
    let pinned = wu.capacity.map(|c| f64::from(c.max(1)));
    let capacity_now =
        |guard: &Option<FastGuard>| pinned.or_else(|| guard.as_ref().and_then(FastGuard::capacity));
    let phases = scenario.phases();
    let total: f64 = phases.iter().map(|p| p.seconds).sum();
    let ticks = (total / dt).round() as u64;
    let mut controller = Controller::new(wu.controller(), Duration::ZERO);
    let mut average = TimeAverage::default();
    let routes = scenario.routes();
    let mut server = Server::with_routes(
        scenario.workers,
        routes.iter().map(|r| (r.time, r.share)).collect(),
    );
    let factors = spread_factors(scenario.spread);
    let fastest = routes.iter().map(|r| r.time).fold(f64::INFINITY, f64::min) * factors[0];
    let cheap = scenario.cheap_share();
    let get = Tier::Get.index();
    let (mut utilization, mut demand, mut probability) = (0.0, 0.0, [0.0; 4]);
    let mut amount = controller.amount();
    let mut next_sample = interval;
    // Requests that reached the controller, were shed by it, and were let into the app.
    let mut traffic = [[0.0; 4]; 3];
    let mut arrivals = scenario.poisson.map(SplitMix64::new);
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
        // A capacity drop: slower requests, or fewer workers.
        let slowdown = if scenario.fewer_workers {
            server.set_workers(kept_workers(f64::from(scenario.workers), p.slowdown));
            1.0
        } else {
            p.slowdown
        };
        server.finish(dt, slowdown);
        let mut offered = scenario.offered(p, phase_start, now).map(|r| r * dt);
        if let Some(rng) = arrivals.as_mut() {
            offered = offered.map(|mean| poisson(rng, mean));
        }
        let shed: [f64; 4] = std::array::from_fn(|t| offered[t] * probability[t]);
        let passing: [f64; 4] = std::array::from_fn(|t| offered[t] - shed[t]);
        let admission = match guard.as_mut() {
            Some(g) => g.admit(now, passing, server.in_flight_by_tier()),
            None => guard::TickResult {
                admitted: vec![(passing, 0.0)],
                refused: [0.0; 4],
            },
        };
        for &(mut amounts, waited) in &admission.admitted {
            for t in 0..4 {
                traffic[2][t] += amounts[t];
            }
            // The cheap path's share of the GETs is answered at once, without a worker.
            let answered = amounts[get] * cheap;
            amounts[get] -= answered;
            if let Some(g) = guard.as_mut() {
                g.started(unmatched_get(), answered, scenario.overhead);
            }
            server.push(now, amounts, waited);
        }
        for t in 0..4 {
            traffic[0][t] += offered[t];
            traffic[1][t] += shed[t];
        }
        let overhead = scenario.overhead;
        let tick = server.start(now, slowdown, scenario.deadline, &mut |st| {
            let class = RouteClass::from_route(st.route, Tier::ALL[st.tier]).index();
            let amount = st.amount / SPREAD_BINS as f64;
            for f in factors {
                let longer = st.service * (f - 1.0);
                log.latencies[st.tier].add(st.total + longer + overhead, amount);
                if let Some(g) = guard.as_mut() {
                    g.started(class, amount, st.in_app + longer + overhead);
                }
            }
        });
        let end = now + dt;
        if let Some(g) = guard.as_mut() {
            let workers = server.workers();
            let queued = (server.in_flight() - workers).max(0.0);
            g.app(queued, workers, fastest * slowdown + overhead);
            g.set_hold(amount > 0.0, lane_on(amount, demand, enforced));
            g.end_of_tick(end, server.in_flight());
        }
        let capacity = capacity_now(&guard);
        let reading = capacity.map_or(0.0, |c| server.in_flight() / c);
        average.observe(Duration::from_secs_f64(end), reading);
        if end >= next_sample - 1e-9 {
            let mean = average.take(Duration::from_secs_f64(end), reading);
            // The middleware's request counts are whole numbers.
            let counts = Traffic {
                reached: traffic[0].map(|n| n.round() as u64),
                shed: traffic[1].map(|n| n.round() as u64),
                admitted: traffic[2].iter().sum::<f64>().round() as u64,
            };
            traffic = [[0.0; 4]; 3];
            let service = guard.as_ref().map_or([None; 4], FastGuard::tier_floors);
            // Unknown capacity: the middleware reads 0 (see control::demand).
            let input = capacity.map_or(0.0, |capacity| {
                offered_work(counts, interval, mean * capacity, service)
                    .map_or(mean, |work| work / capacity)
            });
            demand = with_shed(input, counts, service);
            utilization = input.min(1.0);
            amount = controller.update(utilization, Duration::from_secs_f64(end));
            let plan = wu.probabilities(amount);
            probability = Tier::ALL.map(|t| if enforced { plan.get(t) } else { 0.0 });
            log.samples.push((utilization, demand));
            log.amounts.push(amount);
            next_sample += interval;
        }
        let s = seconds.last_mut().expect("pushed at the first tick");
        // The cheap path is left out of the reports.
        let scored = |t: usize| if t == get { 1.0 - cheap } else { 1.0 };
        for t in 0..4 {
            s.offered[t] += offered[t] * scored(t);
            s.shed[t] += shed[t] * scored(t);
            s.refused[t] += admission.refused[t] * scored(t);
            s.succeeded[t] += tick.succeeded[t];
            s.timed_out[t] += tick.timed_out[t];
        }
        s.in_flight = server.in_flight();
        s.limit = guard.as_ref().map_or(0.0, FastGuard::limit);
        s.capacity = capacity_now(&guard).unwrap_or(0.0);
        (s.utilization, s.demand, s.amount, s.probability) =
            (utilization, demand, amount, probability);
    }
    reports.push(close(&phases[phase], phase_start, &seconds, &log, scenario));
    RunReport {
        capacity: scenario.capacity(),
        end_of_good: wu.end_of_good,
        start_of_bad: wu.start_of_bad,
        seconds,
        phases: reports,
    }
}

/// The fast guard's class of a GET no route matched (the cheap path's 404s).
fn unmatched_get() -> usize {
    RouteClass::unmatched(Tier::Get).index()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "lane_tests.rs"]
mod lane_tests;

#[cfg(test)]
#[path = "probe_tests.rs"]
mod probe_tests;
