//! The request-rate limiter over the in-memory store.
use super::*;
use crate::limiter::Check;
use std::time::Duration;
use crate::schema::QuotaAlgorithm;
use crate::store::{Keyed, MemoryStore};
use std::sync::Arc;
use crate::tier::Tier;

const T0: CheckTime = CheckTime { mono: 0, unix: 0 };

/// The rules of the `limiters.request_rate` block in `yaml`, validated as the file would be.
fn rules(yaml: &str) -> RateRules {
    #[derive(serde::Deserialize)]
    struct File {
        limiters: Limiters,
    }
    #[derive(serde::Deserialize)]
    struct Limiters {
        request_rate: RequestRateConfig,
    }
    let block = serde_saphyr::from_str::<File>(yaml).unwrap().limiters.request_rate;
    block.validate().unwrap();
    RateRules::compile(&block).unwrap()
}

/// What one check saw, whichever way it went.
struct Seen {
    rejection: Option<Rejection>,
    status: RateStatus,
    ticket: RateTicket,
}

fn check(
    r: &RateRules,
    store: &Keyed,
    req: &Request<'_>,
    at: CheckTime,
    elastic: bool,
) -> Seen {
    match r.check(store, req, at, elastic).unwrap() {
        Check::Allowed(a) => Seen {
            rejection: None,
            status: a.status,
            ticket: a.ticket,
        },
        Check::Rejected(rejection, status) => Seen {
            rejection: Some(rejection),
            status,
            ticket: RateTicket::default(),
        },
    }
}

/// Keyed state in a memory store of these sizes.
fn memory(rate_keys: usize, quotas: usize, concurrency_keys: usize) -> Keyed {
    Keyed::local_only(Arc::new(MemoryStore::sized(rate_keys, quotas, concurrency_keys)))
}

fn req<'a>(method: &'a str, path: &'a str, plan: Option<&'a str>) -> Request<'a> {
    Request {
        tier: Tier::Get,
        key: 42,
        ip: 7,
        method,
        path,
        plan,
        preflight: false,
        paid: false,
    }
}

const YAML: &str = "limiters:\n  request_rate:\n    rate: 10\n    burst: 20\n    default_cost: 1\n    costs:\n      \"POST /v1/charges\": 5\n      \"GET /v1/items/{id}\": 2\n      \"GET /v1/items/search\": 4\n    plans:\n      free:\n        rate: 1\n        burst: 5\n        costs:\n          \"POST /v1/charges\": 3\n";

#[test]
fn costs_pick_the_most_specific_route_and_plans_override() {
    let r = rules(YAML);
    assert_eq!(r.cost(0, "GET", "/v1/items/search"), 4);
    assert_eq!(r.cost(0, "GET", "/v1/items/it_1"), 2);
    assert_eq!(r.cost(0, "POST", "/v1/charges"), 5);
    assert_eq!(r.cost(0, "GET", "/elsewhere"), 1);
    let free = r.plan(Some("free"));
    assert_eq!(r.cost(free, "POST", "/v1/charges"), 3);
    assert_eq!(
        r.cost(free, "GET", "/v1/items/x"),
        2,
        "shared table still applies"
    );
    assert_eq!(r.plan(Some("nope")), 0, "unknown plan: default");
    assert_eq!(r.plan(None), 0);
    assert_eq!(r.plan_at(0).limits[0], (20.0, 10.0));
    assert_eq!(r.plan_at(free).limits[0], (5.0, 1.0));
}

#[test]
fn plan_buckets_are_separate_limits() {
    let r = rules(YAML);
    let store = memory(64, 0, 64);
    let mut passed = 0;
    while check(&r, &store, &req("GET", "/x", Some("free")), T0, false)
        .rejection
        .is_none()
    {
        passed += 1;
    }
    assert_eq!(passed, 5);
    let denied = check(&r, &store, &req("GET", "/x", Some("free")), T0, false);
    let rejection = denied.rejection.unwrap();
    assert_eq!(
        (rejection.status.as_u16(), rejection.retry_after),
        (429, Duration::from_secs(1))
    );
    assert_eq!(r.bucket_reading(&denied.status).0, 0);
}

#[test]
fn elastic_factor_widens_the_bucket() {
    let r = rules("limiters:\n  request_rate:\n    rate: 1\n    burst: 4\n    elastic_factor: 2\n");
    let store = memory(64, 0, 64);
    let mut passed = 0;
    while check(&r, &store, &req("GET", "/", None), T0, true)
        .rejection
        .is_none()
    {
        passed += 1;
    }
    assert_eq!(passed, 8);
}

#[test]
fn a_quota_rejection_refunds_the_bucket() {
    let r = rules("limiters:\n  request_rate:\n    rate: 1\n    burst: 10\n    quotas:\n      - {name: signups, algorithm: fixed_window, limit: 2, window: 1d, routes: [\"POST /v1/accounts\"], key: ip}\n");
    assert_eq!(r.quotas[0].rule.algorithm, QuotaAlgorithm::FixedWindow);
    let store = memory(64, 1, 64);
    let signup = req("POST", "/v1/accounts", None);
    for _ in 0..2 {
        let d = check(&r, &store, &signup, T0, false);
        assert!(d.rejection.is_none());
    }
    let d = check(&r, &store, &signup, T0, false);
    let rej = d.rejection.unwrap();
    assert_eq!(rej.policy, Some(RatePolicy::Quota(0)));
    assert_eq!(rej.retry_after, Duration::from_secs(86_400));
    // Eight credits were spent on the two that passed, none on the one that did not.
    let mut passed = 0;
    while check(&r, &store, &req("GET", "/", None), T0, false)
        .rejection
        .is_none()
    {
        passed += 1;
    }
    assert_eq!(passed, 8);
    // The RateLimit field of that answer: tests in crate::http::ratelimit.
    assert_eq!(r.bucket_reading(&d.status), (8, 2));
    assert_eq!(d.status.quotas(), [(0, 0, 86_400)]);
}

#[test]
fn failure_quotas_count_only_failures() {
    let r = rules("limiters:\n  request_rate:\n    quotas:\n      - {name: card_failures, algorithm: sliding_window, limit: 3, window: 1d, routes: [\"POST /v1/charges\"], count: failures}\n");
    let store = memory(64, 1, 64);
    let charge = req("POST", "/v1/charges", None);
    for _ in 0..5 {
        let d = check(&r, &store, &charge, T0, false);
        assert!(d.rejection.is_none(), "successes are not counted");
    }
    for _ in 0..3 {
        let d = check(&r, &store, &charge, T0, false);
        assert!(d.rejection.is_none());
        r.record_failure(store.local(), &d.ticket.failure_ticket().unwrap(), 0);
    }
    let d = check(&r, &store, &charge, CheckTime { mono: 1, unix: 1 }, false);
    assert_eq!(d.rejection.unwrap().policy, Some(RatePolicy::Quota(0)));
}

const PACED: &str = "limiters:\n  request_rate:\n    rate: 10\n    burst: 3\n    per_ip: off\n    excess: delay\n    max_delay: 2s\n";

/// Pacing (`excess: delay`) against its reference, in virtual time: a queue drained at the
/// rate (a bucket of `burst` tokens refilled at `rate`, serving requests in arrival order at
/// the first moment a token is there, turning away one whose turn would come later than
/// `max_delay`). Over seeded arrivals (at twice the rate, then at half, some at one instant), every
/// request is served in order, at the model's moment within 1 ms, and refused when the model
/// refuses it.
#[test]
fn pacing_serves_each_request_when_a_queue_drained_at_the_rate_would() {
    let r = rules(PACED);
    let store = memory(64, 0, 8);
    let mut rng = crate::rng::SplitMix64::new(20261128);
    let (per, burst, max_delay) = (100_000.0, 3.0, 2_000_000.0);
    // The model: tokens left after the last turn, and its time.
    let (mut tokens, mut last) = (burst, 0.0_f64);
    let mut now = 1_000_000_u64;
    let (mut waited, mut refused, mut previous) = (0, 0, 0);
    for i in 0..5_000 {
        // Phases of 200 requests: twice the rate (the queue fills and turns requests
        // away), then half of it (it drains); one in eight at the same instant as the last.
        let spread = if (i / 200) % 2 == 0 { 100_000 } else { 400_000 };
        now += match rng.next_u64() % 8 {
            0 => 0,
            _ => rng.next_u64() % spread,
        };
        let start = (now as f64).max(last);
        let have = (tokens + (start - last) / per).min(burst);
        let turn = start + (1.0 - have).max(0.0) * per;
        let model_refuses = turn - now as f64 > max_delay + 0.5;
        let at = CheckTime {
            mono: now,
            unix: now,
        };
        match r.check(&store, &req("GET", "/v1/items", None), at, false).unwrap() {
            Check::Allowed(a) => {
                assert!(!model_refuses, "request {i} at {now}: the model refuses it");
                let served = now + a.pace;
                assert!((served as f64 - turn).abs() <= 1_000.0, "request {i}: {served} against {turn}");
                assert!(served >= previous, "request {i} served before the one ahead of it");
                previous = served;
                waited += usize::from(a.pace > 0);
                tokens = (have + (turn - start) / per).min(burst) - 1.0;
                last = turn;
            }
            Check::Rejected(rejection, _) => {
                assert!(model_refuses, "request {i} at {now}: the model serves it at {turn}");
                assert!(rejection.retry_after > Duration::ZERO);
                refused += 1;
            }
        }
    }
    assert!(waited > 1_000 && refused > 100, "waited {waited}, refused {refused}");
}

/// Requests of one client charged at one instant from several threads each get a turn of
/// their own: the turns handed out are exactly one step apart, none twice (a request the
/// store could not answer fails open and takes none).
#[test]
fn concurrent_requests_of_one_client_never_share_a_turn() {
    let r = rules("limiters:\n  request_rate:\n    rate: 100\n    burst: 1\n    per_ip: off\n    excess: delay\n    max_delay: 60s\n");
    let store = memory(64, 0, 8);
    let at = CheckTime {
        mono: 1_000_000,
        unix: 1_000_000,
    };
    let mut paces: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..250)
                        .filter_map(|_| match r.check(&store, &req("GET", "/v1/items", None), at, false) {
                            Ok(Check::Allowed(a)) => Some(a.pace),
                            Ok(Check::Rejected(..)) => panic!("within max_delay"),
                            Err(_) => None,
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    paces.sort_unstable();
    assert!(paces.len() > 900, "{} answered", paces.len());
    let expected: Vec<u64> = (0..paces.len() as u64).map(|k| k * 10_000).collect();
    assert_eq!(paces, expected);
}

/// A quota changed to or from a sliding log keeps another kind of table: that change needs a
/// restart (refused live, by name); its limit, window or a move between the counters do not.
#[test]
fn a_quota_changed_to_or_from_a_log_needs_a_restart() {
    use crate::limiter::Limiter;
    use QuotaAlgorithm::{FixedWindow, SlidingLog, SlidingWindow};
    let with = |algorithm, limit| {
        let mut c = RequestRateConfig::default();
        let window = crate::schema::HumanDuration::from_secs(60);
        c.quotas.push(QuotaConfig::new("q", algorithm, limit, window));
        c
    };
    let quotas = Some("limiters.request_rate.quotas");
    assert_eq!(with(SlidingWindow, 5).restart_only(&with(SlidingLog, 5)), quotas);
    assert_eq!(with(SlidingLog, 5).restart_only(&with(FixedWindow, 5)), quotas);
    assert_eq!(with(SlidingLog, 5).restart_only(&with(SlidingLog, 50)), None);
    assert_eq!(with(FixedWindow, 5).restart_only(&with(SlidingWindow, 9)), None);
}

impl RateRules {
    /// The three steps on `keyed`'s local store for one request, request_rate enforced: what
    /// the limiter's unit tests check.
    pub(crate) fn check(
        &self,
        keyed: &Keyed,
        req: &Request<'_>,
        at: CheckTime,
        elastic: bool,
    ) -> Result<Check<RateAdmit, RateStatus>, crate::store::StoreError> {
        let mut ask = Ask::default();
        self.add_to_ask(req, elastic, true, &mut ask);
        let mut answer = crate::store::Answer::new(keyed);
        answer.answer_here(&ask, (at.mono, at.unix), &mut None);
        self.decide(answer.replies(&ask, LimiterName::RequestRate as u8)?, req, at)
    }
}
