//! The open-loop load: a seeded Poisson schedule of arrivals drawn before the run, and a
//! dispatcher that sends each at its planned time on a keep-alive pool, whatever the server
//! does (a slow server never slows the offered load).

use brownout::limiter::LimiterName;
use brownout::rng::{mix, unit, SplitMix64};
use brownout::tier::Tier;
use brownout_cli::config::Route;
use std::cell::RefCell;
use std::rc::Rc;
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
    pub fn plain(times: [std::time::Duration; 5]) -> Self {
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

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Result {
    /// 2xx within the deadline.
    Ok,
    /// 429 (a per-client limit).
    Limited,
    /// 503 (shed).
    Shed,
    /// No answer within the deadline.
    Timeout,
    /// Anything else (a connection error, another status).
    Error,
}

impl Result {
    /// How an answer (its status, or why there was none) `latency` seconds after the planned
    /// time ended, for a client that waits `deadline`.
    fn of(
        answer: std::result::Result<u16, awc::error::SendRequestError>,
        latency: f64,
        deadline: Duration,
    ) -> Self {
        match answer {
            Ok(code) if (200..300).contains(&code) && latency <= deadline.as_secs_f64() => {
                Result::Ok
            }
            Ok(429) => Result::Limited,
            Ok(503) => Result::Shed,
            Ok(_) => Result::Error,
            Err(awc::error::SendRequestError::Timeout) => Result::Timeout,
            Err(_) => Result::Error,
        }
    }
}

/// A request's outcome.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// The planned request.
    pub arrival: Arrival,
    /// How it ended.
    pub result: Result,
    /// Seconds from its planned time to its answer.
    pub latency: f64,
    /// How many times it was sent (1 without retries).
    pub attempts: u32,
    /// Which limiter refused it (the `limiter` of a 429 or 503's problem+json body; `None`
    /// when it was not refused, or the body named none, as another crate's limiter's).
    pub limiter: Option<LimiterName>,
}

/// The `limiter` a refusal's problem+json body names.
fn limiter_of(body: &[u8]) -> Option<LimiterName> {
    const FIELD: &[u8] = b"\"limiter\":\"";
    let start = body.windows(FIELD.len()).position(|w| w == FIELD)? + FIELD.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    LimiterName::parse(std::str::from_utf8(&body[start..start + len]).ok()?)
}

/// Clients' retries of a refused request (429 or 503): at most `max` more attempts, each
/// after a full-jitter backoff (uniform in 0 to `base × 2^k`), and only while the backoff
/// ends within the request's deadline. The jitter is seeded per request, so every arm sees
/// the same clients.
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    /// Attempts after the first.
    pub max: u32,
    /// The first backoff's upper bound.
    pub base: Duration,
    /// Seed of the jitter.
    pub seed: u64,
    /// Whether a client waits at least a refusal's `Retry-After` before retrying it.
    pub honor_retry_after: bool,
}

impl Retries {
    /// The wait before retry `k` (0-based) of request `index`.
    pub fn backoff(&self, index: usize, k: u32) -> Duration {
        let bits = mix(self.seed ^ mix(index as u64) ^ mix(u64::from(k) + 1));
        self.base.mul_f64(unit(bits) * 2f64.powi(k.min(16) as i32))
    }
}

/// Sends the schedule against `base` with a per-request `deadline` (retried as `retries`
/// says); `at_phase(i)` is called when phase `i` starts. Returns every request's outcome.
pub async fn run(
    base: &str,
    arrivals: &[Arrival],
    deadline: Duration,
    retries: Retries,
    mut at_phase: impl FnMut(usize),
) -> Vec<Outcome> {
    let client = awc::Client::builder()
        .connector(awc::Connector::new().limit(8192))
        .timeout(deadline)
        .finish();
    let outcomes: Rc<RefCell<Vec<Outcome>>> = Rc::default();
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(arrivals.len());
    let mut phase = usize::MAX;
    for (index, &arrival) in arrivals.iter().enumerate() {
        if arrival.phase != phase {
            phase = arrival.phase;
            at_phase(phase);
        }
        let planned = start + Duration::from_secs_f64(arrival.at);
        tokio::time::sleep_until(planned).await;
        let (method, path) = match arrival.path {
            Path::Route(r) => r.request(),
            Path::Missing => ("GET", "/v1/none"),
            Path::Health => ("GET", "/healthz"),
        };
        let method: awc::http::Method = method.parse().expect("a method");
        let url = format!("{base}{path}");
        // A load balancer's health check carries no key.
        let auth = match (arrival.path, arrival.tier) {
            (Path::Health, _) => None,
            (_, Tier::Test) => Some(format!("Bearer {TEST_KEY_PREFIX}{:04}", arrival.key)),
            _ => Some(format!("Bearer sk_live_{:04}", arrival.key)),
        };
        let (client, outcomes) = (client.clone(), outcomes.clone());
        tasks.push(actix_web::rt::spawn(async move {
            let ends = planned + deadline;
            let mut attempts = 0;
            let (result, latency, limiter) = loop {
                attempts += 1;
                let left = ends.saturating_duration_since(tokio::time::Instant::now());
                let mut request = client
                    .request(method.clone(), &url)
                    .timeout(left.max(Duration::from_millis(1)));
                if let Some(auth) = &auth {
                    request = request.insert_header(("Authorization", auth.as_str()));
                }
                let answer = request.send().await;
                let latency = (tokio::time::Instant::now() - planned).as_secs_f64();
                let (answer, limiter, retry_after) = match answer {
                    Ok(mut res) => {
                        let code = res.status().as_u16();
                        let retry_after = res
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                            .map(Duration::from_secs);
                        let limiter = if matches!(code, 429 | 503) {
                            let body = res.body().limit(4096).await;
                            body.ok().and_then(|b| limiter_of(&b))
                        } else {
                            None
                        };
                        (Ok(code), limiter, retry_after)
                    }
                    Err(e) => (Err(e), None, None),
                };
                let result = Result::of(answer, latency, deadline);
                let refused = matches!(result, Result::Limited | Result::Shed);
                if refused && attempts <= retries.max {
                    let mut wait = retries.backoff(index, attempts - 1);
                    if retries.honor_retry_after {
                        wait = wait.max(retry_after.unwrap_or_default());
                    }
                    if tokio::time::Instant::now() + wait < ends {
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                }
                break (result, latency, limiter);
            };
            outcomes.borrow_mut().push(Outcome {
                arrival,
                result,
                latency,
                attempts,
                limiter,
            });
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let mut all = outcomes.take();
    all.sort_by(|a, b| a.arrival.at.total_cmp(&b.arrival.at));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_seeded_poisson_at_each_phases_rate_with_the_mix() {
        let phases = phases(Profile::Scorecard, 1.0);
        let plain = Traffic::plain([Duration::from_millis(50); 5]);
        let a = schedule(&phases, 160.0, 7, &plain);
        let b = schedule(&phases, 160.0, 7, &plain);
        assert_eq!(a.len(), b.len(), "the same seed, the same schedule");
        let in_phase = |i: usize| a.iter().filter(|x| x.phase == i).count() as f64;
        // 0.5C for 60 s: 4,800 expected; 4C for 60 s: 38,400.
        assert!((in_phase(0) - 4800.0).abs() < 300.0, "{}", in_phase(0));
        assert!((in_phase(3) - 38400.0).abs() < 800.0, "{}", in_phase(3));
        let critical = a.iter().filter(|x| x.tier == Tier::Critical).count() as f64;
        assert!((critical / a.len() as f64 - 0.1).abs() < 0.01);
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(a.iter().all(|x| x.key < KEYS));
    }

    #[test]
    fn the_spikes_keep_their_length_and_the_low_spike_adds_only_test_and_get() {
        let spike = phases(Profile::Spike, 4.0);
        assert_eq!(spike[2].seconds, 50.0, "2C is compressed");
        assert_eq!((spike[4].seconds, spike[4].load), (30.0, 10.0));
        assert_eq!(spike[5].seconds, 30.0, "and the 30 s after it is not");
        let low = phases(Profile::LowSpike, 1.0);
        let a = schedule(
            &low,
            160.0,
            3,
            &Traffic::plain([Duration::from_millis(50); 5]),
        );
        let rate = |tier: Tier| {
            a.iter().filter(|x| x.phase == 2 && x.tier == tier).count() as f64 / 30.0 / 160.0
        };
        // Critical and POST traffic as at 1C; test and GET 11C more between them.
        assert!(
            (rate(Tier::Critical) - 0.1).abs() < 0.03,
            "{}",
            rate(Tier::Critical)
        );
        assert!(
            (rate(Tier::Post) - 0.2).abs() < 0.04,
            "{}",
            rate(Tier::Post)
        );
        assert!((rate(Tier::Get) + rate(Tier::Test) - 11.7).abs() < 0.3);
        assert!((low[2].mix.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_ramp_rises_without_a_step_and_the_real_app_splits_its_gets_beside_health_checks() {
        let ramp = Phase {
            load_end: 3.0,
            ..phases(Profile::Scorecard, 1.0)[0].clone()
        };
        let ramp = Phase {
            load: 0.3,
            seconds: 300.0,
            ..ramp
        };
        assert_eq!(ramp.load_at(0.0), 0.3);
        assert!((ramp.load_at(150.0) - 1.65).abs() < 1e-12);
        assert_eq!(ramp.load_at(400.0), 3.0, "its end load after it");
        let traffic = Traffic {
            cheap: 0.1,
            gets: [0.5, 0.4, 0.1],
            health: 5.0,
            ..Traffic::plain([Duration::from_millis(20); 5])
        };
        let a = schedule(std::slice::from_ref(&ramp), 100.0, 5, &traffic);
        // The mix's rate follows the ramp: each 30 s slice holds 100 × load(mid) × 30.
        for slice in [0.0, 120.0, 270.0] {
            let n = a
                .iter()
                .filter(|x| x.scored() && (slice..slice + 30.0).contains(&x.at))
                .count() as f64;
            let expected = 100.0 * ramp.load_at(slice + 15.0) * 30.0;
            assert!(
                (n / expected - 1.0).abs() < 0.08,
                "{slice}: {n} vs {expected}"
            );
        }
        let gets: Vec<&Arrival> = a
            .iter()
            .filter(|x| x.scored() && matches!(x.tier, Tier::Get | Tier::Test))
            .collect();
        let share = |r: Route| {
            gets.iter().filter(|x| x.path == Path::Route(r)).count() as f64 / gets.len() as f64
        };
        assert!((share(Route::GetItems) - 0.5).abs() < 0.02);
        assert!((share(Route::GetItem) - 0.4).abs() < 0.02);
        assert!((share(Route::Reports) - 0.1).abs() < 0.01);
        let health: Vec<f64> = a
            .iter()
            .filter(|x| x.path == Path::Health)
            .map(|x| x.at)
            .collect();
        assert_eq!(health.len(), 1500, "5 a second, whatever the load");
        assert!(health.windows(2).all(|w| (w[1] - w[0] - 0.2).abs() < 1e-9));
        let cheap = a.iter().filter(|x| x.path == Path::Missing).count() as f64;
        assert!(
            (cheap / a.iter().filter(|x| x.path != Path::Health).count() as f64 - 0.1).abs() < 0.01
        );
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        let report = a.iter().find(|x| x.path == Path::Route(Route::Reports));
        assert_eq!(report.map(|x| x.work), Some(0.02), "each its route's time");
    }

    #[test]
    fn simulate_models_the_matrix_profile_as_the_bench_runs_it() {
        use brownout::simulate::profile::{built_in, compress_like_bench};
        for f in [1.0, 4.0, 20.0] {
            let bench = phases(Profile::Matrix, f);
            let mut model = built_in("matrix").unwrap();
            compress_like_bench(&mut model, f);
            assert_eq!(bench.len(), model.len());
            for (b, m) in bench.iter().zip(&model) {
                assert_eq!(
                    (b.name, b.seconds, b.load, b.load_end, b.slow),
                    (m.name.as_str(), m.seconds, m.from, m.to, m.slowdown > 1.0),
                    "compressed {f} times"
                );
            }
        }
    }

    #[test]
    fn a_refusal_names_its_limiter_in_its_body() {
        let body =
            br#"{"type":"about:blank","status":503,"limiter":"worker_utilization","tier":"get"}"#;
        assert_eq!(limiter_of(body), Some(LimiterName::WorkerUtilization));
        assert_eq!(limiter_of(b"{\"limiter\":\"nope\"}"), None);
        assert_eq!(limiter_of(b"Service Unavailable"), None);
    }

    #[test]
    fn backoffs_are_seeded_full_jitter_that_doubles() {
        let r = Retries {
            max: 3,
            base: Duration::from_millis(100),
            seed: 9,
            honor_retry_after: false,
        };
        assert_eq!(
            r.backoff(5, 1),
            r.backoff(5, 1),
            "the same request, the same wait"
        );
        assert_ne!(
            r.backoff(5, 0),
            r.backoff(6, 0),
            "requests do not retry in step"
        );
        for k in 0..4 {
            let bound = Duration::from_millis(100 * (1 << k));
            let waits: Vec<_> = (0..1000).map(|i| r.backoff(i, k)).collect();
            assert!(waits.iter().all(|w| *w < bound), "below base × 2^k");
            let mean = waits.iter().sum::<Duration>() / 1000;
            let half = bound / 2;
            assert!(
                mean > half.mul_f64(0.9) && mean < half.mul_f64(1.1),
                "uniform: {mean:?}"
            );
        }
    }
}
