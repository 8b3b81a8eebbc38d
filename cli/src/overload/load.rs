//! The open-loop load: a seeded Poisson schedule of arrivals drawn before the run, and a
//! dispatcher that sends each at its planned time on a keep-alive pool, whatever the server
//! does (a slow server never slows the offered load).

use brownout::limiter::LimiterName;
use brownout::rng::{mix, unit, SplitMix64};
use brownout::tier::Tier;
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
    /// Offered load in multiples of the capacity.
    pub load: f64,
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
    /// 10C spike of the standard mix and 30 s at 0.3C after it, then the capacity halved at
    /// 1.5C of the original capacity, and 0.3C.
    Matrix,
}

/// The phases of `profile`, each `1 / compress` as long, but for a spike and the 30 s after
/// it (their targets are per 5 s and within 5 s of the spike's end, so they keep their length).
/// The scorecard's 0.75C lasts 3 minutes: its target asks that nothing be shed in 3 minutes.
pub fn phases(profile: Profile, compress: f64) -> Vec<Phase> {
    let with = |name, seconds: f64, load, slow, mix| Phase {
        name,
        seconds,
        load,
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
            p("back 0.3C", 40.0, 0.3, false),
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
    /// Sent to a path the app answers at once (a 404), outside the mix.
    pub cheap: bool,
}

/// Draws the whole schedule: Poisson arrivals at each phase's rate (capacity × load), and
/// `cheap` of all arrivals more on a path the app answers at once (so the mix keeps its
/// rate: 10% cheap adds a ninth).
pub fn schedule(phases: &[Phase], capacity: f64, seed: u64, cheap: f64) -> Vec<Arrival> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    let mut start = 0.0;
    let cheap = cheap.clamp(0.0, 0.9);
    for (i, p) in phases.iter().enumerate() {
        let rate = capacity * p.load / (1.0 - cheap);
        let mut t = start;
        loop {
            t += -(1.0 - rng.next_f64()).ln() / rate;
            if t >= start + p.seconds {
                break;
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
            out.push(Arrival {
                at: t,
                phase: i,
                tier: if is_cheap { Tier::Get } else { tier },
                key,
                cheap: is_cheap,
            });
        }
        start += p.seconds;
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
        let (method, path, key) = match arrival.tier {
            _ if arrival.cheap => ("GET", "/v1/none", "sk_live"),
            Tier::Critical => ("POST", "/v1/charges", "sk_live"),
            Tier::Post => ("POST", "/v1/items", "sk_live"),
            Tier::Get => ("GET", "/v1/items", "sk_live"),
            Tier::Test => ("GET", "/v1/items", "sk_test"),
        };
        let method: awc::http::Method = method.parse().expect("a method");
        let url = format!("{base}{path}");
        let auth = format!("Bearer {key}_{:04}", arrival.key);
        let (client, outcomes) = (client.clone(), outcomes.clone());
        tasks.push(actix_web::rt::spawn(async move {
            let ends = planned + deadline;
            let mut attempts = 0;
            let (result, latency, limiter) = loop {
                attempts += 1;
                let left = ends.saturating_duration_since(tokio::time::Instant::now());
                let answer = client
                    .request(method.clone(), &url)
                    .insert_header(("Authorization", auth.as_str()))
                    .timeout(left.max(Duration::from_millis(1)))
                    .send()
                    .await;
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
        let a = schedule(&phases, 160.0, 7, 0.0);
        let b = schedule(&phases, 160.0, 7, 0.0);
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
        let a = schedule(&low, 160.0, 3, 0.0);
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
