//! The open-loop load's plan: a seeded Poisson schedule of arrivals drawn before the run (the
//! phases, ramps, the mix, routes and health checks); [`super::send`] sends it.

use brownout::rng::SplitMix64;
use brownout::tier::Tier;
use brownout_cli::config::Route;
use std::time::Duration;

/// One phase of the scorecard.
#[derive(Debug, Clone)]
pub struct Phase {
    /// Its name in the tables.
    pub name: &'static str,
    /// How long it lasts, in seconds.
    pub seconds: f64,
    /// Offered load in multiples of the capacity (at its start).
    pub load: f64,
    /// The load at its end: a ramp, linear from `load` (`load` itself: a step).
    pub load_end: f64,
    /// Whether the demo's service time is doubled (a capacity drop).
    pub slow: bool,
    /// Each tier's share of the load, in [`Tier::ALL`] order (the standard [`MIX`] but in a
    /// low-priority spike).
    pub mix: [f64; 4],
}

/// The load profiles of `bench overload --profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// The scorecard: 0.5C, 0.75C, 2C, 4C, 0.3C, then a capacity drop at 1.5C of the original
    /// capacity and its end.
    Scorecard,
    /// Critical demand alone past capacity: 0.5C, 0.75C, 2C, 0.3C, then 30 s at 10C of the
    /// standard mix (critical alone is 1C) and 30 s at 0.5C after it.
    Spike,
    /// Low-priority traffic only: 0.5C, 30 s at 1C, 30 s of test and GET traffic at 11C on
    /// top of the 1C mix, and 30 s at 1C after it.
    LowSpike,
    /// Every target of the app matrix in one run: 0.5C, 3 minutes of 0.75C, 2C, 4C, 0.3C, a
    /// 10C spike of the standard mix and 30 s at 0.3C after it, the capacity halved at 1.5C
    /// of the original capacity, 150 s at 0.3C, and a slow ramp from 0.3C to 3C over 5
    /// minutes.
    Matrix,
}

/// The matrix's last phase: the load rises from 0.3C to 3C, no step.
pub const RAMP: &str = "ramp 0.3C to 3C";

impl Phase {
    /// The load `t` seconds into the phase.
    pub fn load_at(&self, t: f64) -> f64 {
        self.load + (self.load_end - self.load) * (t / self.seconds).clamp(0.0, 1.0)
    }
}

/// The phases of `profile`, each `1 / compress` as long, but for a spike and the 30 s after
/// it (their targets are per 5 s and within 5 s of the spike's end, so they keep their length).
/// The scorecard's 0.75C lasts 3 minutes: its target asks that nothing be shed in 3 minutes.
pub fn phases(profile: Profile, compress: f64) -> Vec<Phase> {
    let with = |name, seconds: f64, load, slow, mix| Phase {
        name,
        seconds,
        load,
        load_end: load,
        slow,
        mix,
    };
    let p =
        |name, seconds: f64, load, slow| with(name, (seconds / compress).max(2.0), load, slow, MIX);
    let fixed = |name, seconds, load| with(name, seconds, load, false, MIX);
    match profile {
        Profile::Matrix => vec![
            p("0.5C", 60.0, 0.5, false),
            p("0.75C", 180.0, 0.75, false),
            p("2C", 240.0, 2.0, false),
            p("4C", 60.0, 4.0, false),
            p("0.3C", 120.0, 0.3, false),
            fixed("10C spike", 20.0, 10.0),
            fixed("after 0.3C", 30.0, 0.3),
            p("halved 1.5C", 80.0, 1.5, true),
            // Calm long enough, whatever the compression, for the controller to bring every
            // tier back (it returns slowly) before the ramp starts.
            fixed("back 0.3C", 150.0, 0.3),
            Phase {
                load_end: 3.0,
                ..p(RAMP, 300.0, 0.3, false)
            },
        ],
        Profile::Scorecard => vec![
            p("0.5C", 60.0, 0.5, false),
            p("0.75C", 180.0, 0.75, false),
            p("2C", 240.0, 2.0, false),
            p("4C", 60.0, 4.0, false),
            p("0.3C", 300.0, 0.3, false),
            p("drop 1.5C", 120.0, 1.5, true),
            p("restored 1.5C", 60.0, 1.5, false),
        ],
        Profile::Spike => vec![
            p("0.5C", 40.0, 0.5, false),
            p("0.75C", 150.0, 0.75, false),
            p("2C", 200.0, 2.0, false),
            p("0.3C", 60.0, 0.3, false),
            fixed("10C spike", 30.0, 10.0),
            fixed("after 0.5C", 30.0, 0.5),
        ],
        Profile::LowSpike => {
            // 11C more of test and GET traffic, split as the standard mix splits them (5:2).
            let [critical, post, get, test] = MIX;
            let (extra_get, extra_test) = (11.0 * 5.0 / 7.0, 11.0 * 2.0 / 7.0);
            let spike = [critical, post, get + extra_get, test + extra_test].map(|c| c / 12.0);
            vec![
                p("0.5C", 40.0, 0.5, false),
                fixed("1C", 30.0, 1.0),
                with("low spike 12C", 30.0, 12.0, false, spike),
                fixed("after 1C", 30.0, 1.0),
            ]
        }
    }
}

/// The tiers' share of the standard load, in [`Tier::ALL`] order: 10% critical
/// (`POST /v1/charges`), 20% `POST /v1/items`, 50% `GET /v1/items`, 20% test mode (`GET`
/// with a test key).
pub const MIX: [f64; 4] = [0.1, 0.2, 0.5, 0.2];

/// API keys the load is spread over.
pub const KEYS: u64 = 1000;

/// What the bench's clients put before a test-mode key (the bench names it in the settings it
/// runs, rather than leaning on the library's default).
pub const TEST_KEY_PREFIX: &str = "sk_test_";

/// The routes the bench names critical: charges, and the load balancer's health check.
pub const CRITICAL_ROUTES: [&str; 2] = ["POST /v1/charges", "GET /healthz"];

/// Where a planned request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// One of the app's routes.
    Route(Route),
    /// A path the app answers 404 at once (outside the mix).
    Missing,
    /// `GET /healthz`, at a fixed rate (outside the mix).
    Health,
}

/// What the load knows of the app it is sent to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traffic {
    /// The share of all arrivals on a path answered at once (the mix keeps its rate: 10%
    /// cheap adds a ninth).
    pub cheap: f64,
    /// How GET requests (test mode's too) split over `GET /v1/items`, `GET /v1/items/{id}`
    /// and `GET /v1/reports`.
    pub gets: [f64; 3],
    /// Health checks a second, whatever the load.
    pub health: f64,
    /// Each route's mean time in seconds ([`Route::ALL`] order): what a success is worth.
    pub times: [f64; 5],
}

impl Traffic {
    /// Every GET to `GET /v1/items`, nothing beside the mix, routes taking `times`.
    pub fn plain(times: [Duration; 5]) -> Self {
        Self {
            cheap: 0.0,
            gets: [1.0, 0.0, 0.0],
            health: 0.0,
            times: times.map(|d| d.as_secs_f64()),
        }
    }

    /// The mean time of a request of the standard mix ([`MIX`]).
    pub fn mean_service(&self) -> f64 {
        let [critical, post, get, test] = MIX;
        let t = |r: Route| self.times[r as usize];
        critical * t(Route::Charges) + post * t(Route::PostItems) + (get + test) * self.get_time()
    }

    /// The mean time of a GET.
    pub fn get_time(&self) -> f64 {
        let [items, item, reports] = self.gets;
        let t = |r: Route| self.times[r as usize];
        items * t(Route::GetItems) + item * t(Route::GetItem) + reports * t(Route::Reports)
    }

    /// The GET route `pick` (uniform in 0..1) lands on.
    fn get_route(&self, pick: f64) -> Route {
        let [items, item, _] = self.gets;
        if pick < items {
            Route::GetItems
        } else if pick < items + item {
            Route::GetItem
        } else {
            Route::Reports
        }
    }
}

/// One planned request.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    /// Seconds from the start of the run.
    pub at: f64,
    /// Index of its phase.
    pub phase: usize,
    /// Its tier.
    pub tier: Tier,
    /// Its client.
    pub key: u64,
    /// Where it goes.
    pub path: Path,
    /// What it is worth served: its route's mean time, seconds (0 outside the mix).
    pub work: f64,
}

impl Arrival {
    /// Whether it is part of the standard mix the tables score (not a 404, not a health
    /// check).
    pub fn scored(&self) -> bool {
        matches!(self.path, Path::Route(_))
    }
}

/// Draws the whole schedule: Poisson arrivals at each phase's rate (capacity × load; thinned
/// to the load at each moment on a ramp), `traffic.cheap` of all arrivals more on a path the
/// app answers at once, and health checks at their fixed rate.
pub fn schedule(phases: &[Phase], capacity: f64, seed: u64, traffic: &Traffic) -> Vec<Arrival> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    let mut start = 0.0;
    let cheap = traffic.cheap.clamp(0.0, 0.9);
    let one_get = traffic.gets[0] >= 1.0;
    for (i, p) in phases.iter().enumerate() {
        let peak = p.load.max(p.load_end);
        let rate = capacity * peak / (1.0 - cheap);
        let mut t = start;
        loop {
            t += -(1.0 - rng.next_f64()).ln() / rate;
            if t >= start + p.seconds {
                break;
            }
            if p.load_end != p.load && rng.next_f64() * peak >= p.load_at(t - start) {
                continue;
            }
            let mut pick = rng.next_f64();
            let tier = Tier::ALL
                .into_iter()
                .zip(p.mix)
                .find(|(_, share)| {
                    pick -= share;
                    pick < 0.0
                })
                .map_or(Tier::Get, |(t, _)| t);
            let key = rng.next_u64() % KEYS;
            let is_cheap = cheap > 0.0 && rng.next_f64() < cheap;
            let (tier, path) = match tier {
                _ if is_cheap => (Tier::Get, Path::Missing),
                Tier::Critical => (tier, Path::Route(Route::Charges)),
                Tier::Post => (tier, Path::Route(Route::PostItems)),
                Tier::Get | Tier::Test if one_get => (tier, Path::Route(Route::GetItems)),
                Tier::Get | Tier::Test => (tier, Path::Route(traffic.get_route(rng.next_f64()))),
            };
            let work = match path {
                Path::Route(r) => traffic.times[r as usize],
                Path::Missing | Path::Health => 0.0,
            };
            out.push(Arrival {
                at: t,
                phase: i,
                tier,
                key,
                path,
                work,
            });
        }
        start += p.seconds;
    }
    if traffic.health > 0.0 {
        let step = 1.0 / traffic.health;
        let (mut t, mut phase, mut ends) =
            (step / 2.0, 0, phases.first().map_or(0.0, |p| p.seconds));
        while t < start {
            while t >= ends && phase + 1 < phases.len() {
                phase += 1;
                ends += phases[phase].seconds;
            }
            out.push(Arrival {
                at: t,
                phase,
                tier: Tier::Get,
                key: 0,
                path: Path::Health,
                work: 0.0,
            });
            t += step;
        }
        out.sort_by(|a, b| a.at.total_cmp(&b.at));
    }
    out
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
