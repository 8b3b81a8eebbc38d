//! The request-rate limiter: a per-key bucket of credits (weighted endpoint costs, plans, soft
//! and elastic throttling) plus optional window quotas, all answered by the [`Store`].

mod rules;

pub use rules::{CostTable, Plan, Quota, RateRules};

use super::{Check, LimiterName, RatePolicy, RejectStatus, Rejection, Request};
use crate::config::{QuotaCount, QuotaKey};
use crate::math::gcra::Charge;
use crate::store::{Store, StoreError};
use std::time::Duration;

/// Most quotas reported in one `RateLimit` field.
const REPORTED_QUOTAS: usize = 4;

/// What the limiter saw, for the `RateLimit` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateStatus {
    /// Index of the plan used.
    pub plan: u16,
    /// Whether the elastic bucket was used.
    pub elastic: bool,
    /// The bucket's TAT and the time of the check (µs); what the header reports is computed
    /// from them only when the header is written.
    pub tat: u64,
    /// The per-IP ceiling's TAT (µs), when it was checked.
    pub ip_tat: u64,
    /// When the request was checked (µs).
    pub at: u64,
    /// (quota index, requests left, seconds to reset) of the quotas evaluated.
    quotas: [(u8, u16, u32); REPORTED_QUOTAS],
    reported: u8,
}

impl RateStatus {
    /// (quota index, requests left, seconds to reset) of the quotas evaluated (at most four).
    pub fn quotas(&self) -> &[(u8, u16, u32)] {
        &self.quotas[..usize::from(self.reported)]
    }

    /// The same status with the bucket's TAT at `tat`.
    pub fn with_tat(mut self, tat: u64) -> Self {
        self.tat = tat;
        self
    }
}

/// What the limiter took, to give back if a later limiter rejects the request, and the
/// failure-counting quotas to charge if the app answers with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateTicket {
    key: u64,
    ip: u64,
    increment: u64,
    ip_increment: u64,
    counted: u16,
    /// Quotas (bit per index) that count this request if it fails.
    pub failures: u16,
}

/// The time of a check in µs: monotonic for buckets, Unix time for quota windows, which
/// follow the calendar (a `1d` window starts at UTC midnight on every server, whenever it
/// started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckTime {
    /// The monotonic clock.
    pub mono: u64,
    /// Microseconds since the Unix epoch.
    pub unix: u64,
}

/// What an admitted request took from the limiter, and what the limiter saw. (A rejected one
/// took nothing; its answer carries the [`RateStatus`] for the `RateLimit` fields.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateAdmit {
    /// For the `RateLimit` field.
    pub status: RateStatus,
    /// The bucket's TAT if what was taken is given back.
    pub refunded: u64,
    /// What was taken.
    pub ticket: RateTicket,
}

/// Whole seconds in `us` microseconds, rounded up.
pub fn secs_up(us: u64) -> u32 {
    u32::try_from(us.div_ceil(1_000_000)).unwrap_or(u32::MAX)
}

/// `n` as a `u32`, saturating.
pub fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The key of an IP's ceiling bucket: kept apart from the IP's own client bucket (a client
/// without an API key is keyed by its IP too, and must not be charged twice in one bucket).
fn ceiling_key(ip: u64) -> u64 {
    crate::rng::mix(ip ^ 0x7065_725f_6970_0000) // "per_ip"
}

impl RateRules {
    /// Checks one request; `elastic` says whether the server has room to spare. A rejected
    /// request is charged nothing (its ticket is empty).
    pub fn check(
        &self,
        store: &dyn Store,
        req: &Request<'_>,
        at: CheckTime,
        elastic: bool,
    ) -> Result<Check<RateAdmit, RateStatus>, StoreError> {
        let now = at.mono;
        let plan = self.plan(req.plan);
        let bucket = self.bucket(plan, elastic);
        let cost = self.cost(plan, req.method, req.path);
        let increment = bucket.increment(cost);
        let mut status = RateStatus {
            plan: plan as u16,
            elastic,
            at: now,
            ..RateStatus::default()
        };
        let mut ticket = RateTicket {
            key: req.key,
            ip: req.ip,
            ..RateTicket::default()
        };
        let reject = |retry_us: u64, policy: Option<RatePolicy>| Rejection {
            limiter: LimiterName::RequestRate,
            tier: req.tier,
            status: RejectStatus::TooManyRequests,
            retry_after: Duration::from_micros(retry_us),
            policy,
        };
        if let Some(ceiling) = &self.per_ip {
            // An expensive route costs at most the whole ceiling, so it can always pass.
            let charge = ceiling.increment(cost.min(ceiling.burst as u32));
            match store.rate_charge(ceiling_key(req.ip), now, charge, ceiling.tolerance())? {
                Charge::Denied { tat, wait } => {
                    status.ip_tat = tat;
                    let rejection = reject(wait, Some(RatePolicy::PerIp));
                    return Ok(Check::Rejected(rejection, status));
                }
                Charge::Allowed { tat } => {
                    status.ip_tat = tat;
                    ticket.ip_increment = charge;
                }
            }
        }
        let charged = store.rate_charge(req.key, now, increment, bucket.tolerance());
        let charged_tat = match charged {
            Ok(Charge::Allowed { tat }) => {
                ticket.increment = increment;
                tat
            }
            Ok(Charge::Denied { tat, wait }) => {
                self.refund(store, &ticket, at);
                return Ok(Check::Rejected(reject(wait, None), status.with_tat(tat)));
            }
            Err(e) => {
                self.refund(store, &ticket, at);
                return Err(e);
            }
        };
        status.tat = charged_tat;
        // The bucket as it reads if this request's charge is given back.
        let refunded = charged_tat.saturating_sub(increment);
        for (i, quota) in self.quotas.iter().enumerate() {
            if !quota.applies(req.method, req.path) {
                continue;
            }
            let key = match quota.key {
                QuotaKey::Client => req.key,
                QuotaKey::Ip => req.ip,
            };
            let add = quota.count == QuotaCount::Requests;
            let check = match store.quota_hit(i, key, at.unix, &quota.rule, add) {
                Ok(check) => check,
                Err(e) => {
                    self.refund(store, &ticket, at);
                    return Err(e);
                }
            };
            if status.reported < REPORTED_QUOTAS as u8 {
                let remaining = u16::try_from(check.remaining).unwrap_or(u16::MAX);
                status.quotas[status.reported as usize] =
                    (i as u8, remaining, secs_up(check.reset));
                status.reported += 1;
            }
            if !check.allowed {
                self.refund(store, &ticket, at);
                let rejection = reject(check.retry, Some(RatePolicy::Quota(i as u8)));
                return Ok(Check::Rejected(rejection, status.with_tat(refunded)));
            }
            match quota.count {
                QuotaCount::Requests => ticket.counted |= 1 << i,
                QuotaCount::Failures => ticket.failures |= 1 << i,
            }
        }
        Ok(Check::Allowed(RateAdmit {
            status,
            refunded,
            ticket,
        }))
    }

    /// Gives back what `ticket` took (a later limiter rejected the request).
    pub fn refund(&self, store: &dyn Store, ticket: &RateTicket, at: CheckTime) {
        if ticket.increment > 0 {
            let _ = store.rate_refund(ticket.key, ticket.increment);
        }
        if ticket.ip_increment > 0 {
            let _ = store.rate_refund(ceiling_key(ticket.ip), ticket.ip_increment);
        }
        for (i, quota) in self.quotas.iter().enumerate() {
            if ticket.counted & (1 << i) != 0 {
                let key = self.quota_key(quota, ticket);
                let _ = store.quota_refund(i, key, at.unix, &quota.rule);
            }
        }
    }

    /// Counts a failed response against the failure quotas the request matched; `unix_now`
    /// in µs since the Unix epoch.
    pub fn record_failure(&self, store: &dyn Store, ticket: &RateTicket, unix_now: u64) {
        for (i, quota) in self.quotas.iter().enumerate() {
            if ticket.failures & (1 << i) != 0 {
                let key = self.quota_key(quota, ticket);
                let _ = store.quota_hit(i, key, unix_now, &quota.rule, true);
            }
        }
    }

    /// Credits left of the nominal burst and seconds until the bucket is full, as of the check.
    pub fn bucket_reading(&self, status: &RateStatus) -> (u32, u32) {
        let bucket = self.bucket(usize::from(status.plan), status.elastic);
        (
            saturate(bucket.remaining(status.tat, status.at)),
            secs_up(status.tat.saturating_sub(status.at)),
        )
    }

    fn quota_key(&self, quota: &Quota, ticket: &RateTicket) -> u64 {
        match quota.key {
            QuotaKey::Client => ticket.key,
            QuotaKey::Ip => ticket.ip,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, QuotaAlgorithm};
    use crate::store::MemoryStore;
    use crate::tier::Tier;

    const T0: CheckTime = CheckTime { mono: 0, unix: 0 };

    fn rules(yaml: &str) -> RateRules {
        RateRules::compile(&Config::from_yaml_str(yaml).unwrap().limiters.request_rate).unwrap()
    }

    /// What one check saw, whichever way it went.
    struct Seen {
        rejection: Option<Rejection>,
        status: RateStatus,
        ticket: RateTicket,
    }

    fn check(
        r: &RateRules,
        store: &MemoryStore,
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

    fn req<'a>(method: &'a str, path: &'a str, plan: Option<&'a str>) -> Request<'a> {
        Request {
            tier: Tier::Get,
            key: 42,
            ip: 7,
            method,
            path,
            plan,
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
        let store = MemoryStore::new(64, 0, 64);
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
        let r =
            rules("limiters:\n  request_rate:\n    rate: 1\n    burst: 4\n    elastic_factor: 2\n");
        let store = MemoryStore::new(64, 0, 64);
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
        let store = MemoryStore::new(64, 1, 64);
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
        let store = MemoryStore::new(64, 1, 64);
        let charge = req("POST", "/v1/charges", None);
        for _ in 0..5 {
            let d = check(&r, &store, &charge, T0, false);
            assert!(d.rejection.is_none(), "successes are not counted");
        }
        for _ in 0..3 {
            let d = check(&r, &store, &charge, T0, false);
            assert!(d.rejection.is_none());
            r.record_failure(&store, &d.ticket, 0);
        }
        let d = check(&r, &store, &charge, CheckTime { mono: 1, unix: 1 }, false);
        assert_eq!(d.rejection.unwrap().policy, Some(RatePolicy::Quota(0)));
    }
}
