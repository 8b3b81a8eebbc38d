//! The open-loop sender: each planned request sent at its time on a keep-alive pool, whatever
//! the server does (a slow server never slows the offered load), retried as clients would,
//! and how each ended.

use super::load::{Arrival, Path, TEST_KEY_PREFIX};
use brownout::limiter::LimiterName;
use brownout::rng::{mix, unit};
use brownout::tier::Tier;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

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
            (Path::Route(_) | Path::Missing, Tier::Test) => {
                Some(format!("Bearer {TEST_KEY_PREFIX}{:04}", arrival.key))
            }
            (Path::Route(_) | Path::Missing, Tier::Critical | Tier::Post | Tier::Get) => {
                Some(format!("Bearer sk_live_{:04}", arrival.key))
            }
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
