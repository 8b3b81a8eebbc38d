//! Config blocks of the three per-user limiters: `request_rate` (with plans and quotas),
//! `concurrent_requests` and `fleet_usage`.

use super::{HumanDuration, Mode};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `limiters.request_rate:` — a per-key token bucket of credits with weighted endpoint costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestRateConfig {
    /// enforce | dark | off.
    pub mode: Mode,
    /// Credits regenerated per second (the default plan).
    pub rate: f64,
    /// Most credits a key can hold (the default plan).
    pub burst: u32,
    /// Cost of a route not in `costs`.
    pub default_cost: u32,
    /// Cost per route pattern, e.g. `"POST /v1/charges": 20` (the most specific match wins).
    pub costs: BTreeMap<String, u32>,
    /// Named plans with their own rate, burst and costs.
    pub plans: BTreeMap<String, PlanConfig>,
    /// Soft throttling: 0.1 lets a key go 10% over its burst before it is limited.
    pub soft_overage: f64,
    /// Elastic throttling: while utilization is below `end_of_good`, rate and burst are
    /// multiplied by this (1 = off).
    pub elastic_factor: f64,
    /// Send `RateLimit-Policy` and `RateLimit` on every response this limiter evaluated.
    pub headers: bool,
    /// Most keys tracked at once; a flood of new keys evicts the oldest idle ones.
    pub max_keys: usize,
    /// How often idle keys (full buckets, expired windows) are dropped from memory.
    pub eviction_interval: HumanDuration,
    /// "N per window" rules, checked with the bucket.
    pub quotas: Vec<QuotaConfig>,
}

impl Default for RequestRateConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            rate: 100.0,
            burst: 500,
            default_cost: 1,
            costs: BTreeMap::new(),
            plans: BTreeMap::new(),
            soft_overage: 0.0,
            elastic_factor: 1.0,
            headers: true,
            max_keys: 1_000_000,
            eviction_interval: HumanDuration::from_secs(10),
            quotas: Vec::new(),
        }
    }
}

/// `limiters.request_rate.plans.<name>:` — a customer plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    /// Credits regenerated per second.
    pub rate: f64,
    /// Most credits a key can hold.
    pub burst: u32,
    /// Cost of a route matched by neither this plan's nor the default `costs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_cost: Option<u32>,
    /// Costs that override the default table for this plan.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub costs: BTreeMap<String, u32>,
}

/// How a quota counts its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaAlgorithm {
    /// Counts per aligned window; allows a burst of twice the limit across a boundary.
    FixedWindow,
    /// Weights the previous window by its unexpired fraction; no boundary burst.
    SlidingWindow,
}

/// What a quota counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaKey {
    /// The request's key: its API key, else its client IP.
    Client,
    /// The client IP, even when an API key is present (e.g. sign-ups per IP).
    Ip,
}

/// Which requests a quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaCount {
    /// Every matching request.
    Requests,
    /// Matching requests the app answered with a 4xx or 5xx (e.g. failed card attempts).
    Failures,
}

/// One entry of `limiters.request_rate.quotas`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// A short name, used in headers and problem bodies.
    pub name: String,
    /// fixed_window | sliding_window.
    pub algorithm: QuotaAlgorithm,
    /// Most requests per window (1..=65535).
    pub limit: u32,
    /// The window.
    pub window: HumanDuration,
    /// Route patterns counted (empty: every route).
    #[serde(default)]
    pub routes: Vec<String>,
    /// client | ip.
    #[serde(default = "default_quota_key")]
    pub key: QuotaKey,
    /// requests | failures.
    #[serde(default = "default_quota_count")]
    pub count: QuotaCount,
}

fn default_quota_key() -> QuotaKey {
    QuotaKey::Client
}

fn default_quota_count() -> QuotaCount {
    QuotaCount::Requests
}

/// `limiters.concurrent_requests:` — a per-key cap on requests in progress.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConcurrentRequestsConfig {
    /// enforce | dark | off.
    pub mode: Mode,
    /// Most requests one key may have in progress.
    pub max_in_flight: u32,
    /// `Retry-After` of a rejected request.
    pub retry_after: HumanDuration,
    /// Most keys with requests in progress tracked at once.
    pub max_keys: usize,
}

impl Default for ConcurrentRequestsConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            max_in_flight: 20,
            retry_after: HumanDuration::from_secs(1),
            max_keys: 65_536,
        }
    }
}

/// `limiters.fleet_usage:` — capacity reserved for critical traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetUsageConfig {
    /// enforce | dark | off.
    pub mode: Mode,
    /// Requests in progress the fleet (in memory: this process) can serve.
    pub capacity: u32,
    /// Share of `capacity` only critical requests may use.
    pub reserved_for_critical: f64,
    /// `Retry-After` of a rejected request.
    pub retry_after: HumanDuration,
}

impl Default for FleetUsageConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            capacity: 100,
            reserved_for_critical: 0.2,
            retry_after: HumanDuration::from_secs(1),
        }
    }
}

impl FleetUsageConfig {
    /// In-flight non-critical requests allowed: `(1 - reserved) × capacity`, rounded down.
    pub fn non_critical_limit(&self) -> u64 {
        ((1.0 - self.reserved_for_critical) * f64::from(self.capacity)).floor() as u64
    }
}

use super::validate::{ensure, ratio, Check};
use super::ConfigError;
use crate::classify::RoutePattern;

const RR: &str = "limiters.request_rate";

/// Names that end up in headers and metrics-free JSON: short tokens only.
fn token(name: &str, key: &str) -> Check {
    ensure(
        !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
        key,
        format!("must be 1-64 letters, digits, '_' or '-' (got {name:?})"),
    )
}

fn costs(table: &BTreeMap<String, u32>, burst: u32, key: &str) -> Check {
    for (route, &cost) in table {
        let k = format!("{key}.costs[{route:?}]");
        RoutePattern::parse(route).map_err(|m| ConfigError::invalid(&k, m))?;
        ensure(
            cost <= burst,
            &k,
            format!("is {cost}, more than the burst of {burst}: such a request could never pass"),
        )?;
    }
    Ok(())
}

fn rate_and_burst(rate: f64, burst: u32, key: &str) -> Check {
    ensure(
        rate.is_finite() && rate > 0.0 && rate <= 1e6,
        &format!("{key}.rate"),
        format!("must be greater than 0 and at most 1000000 credits per second (got {rate})"),
    )?;
    ensure(burst >= 1, &format!("{key}.burst"), "must be at least 1")
}

impl RequestRateConfig {
    pub(crate) fn validate(&self) -> Check {
        rate_and_burst(self.rate, self.burst, RR)?;
        ensure(
            self.default_cost <= self.burst,
            &format!("{RR}.default_cost"),
            "must not exceed burst",
        )?;
        costs(&self.costs, self.burst, RR)?;
        for (name, plan) in &self.plans {
            let key = format!("{RR}.plans.{name}");
            token(name, &key)?;
            rate_and_burst(plan.rate, plan.burst, &key)?;
            let default_cost = plan.default_cost.unwrap_or(self.default_cost);
            ensure(
                default_cost <= plan.burst,
                &format!("{key}.default_cost"),
                format!(
                    "is {default_cost}, more than the plan's burst of {}",
                    plan.burst
                ),
            )?;
            // The plan's own costs and the default table both apply to it.
            costs(&plan.costs, plan.burst, &key)?;
            costs(&self.costs, plan.burst, &key)?;
        }
        ensure(
            self.soft_overage.is_finite() && (0.0..=10.0).contains(&self.soft_overage),
            &format!("{RR}.soft_overage"),
            format!("must be between 0 and 10 (got {})", self.soft_overage),
        )?;
        ensure(
            self.elastic_factor.is_finite() && (1.0..=100.0).contains(&self.elastic_factor),
            &format!("{RR}.elastic_factor"),
            format!("must be between 1 and 100 (got {})", self.elastic_factor),
        )?;
        ensure(
            (8..=1 << 30).contains(&self.max_keys),
            &format!("{RR}.max_keys"),
            format!("must be between 8 and 1073741824 (got {})", self.max_keys),
        )?;
        ensure(
            !self.eviction_interval.get().is_zero(),
            &format!("{RR}.eviction_interval"),
            "must be greater than zero",
        )?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, q) in self.quotas.iter().enumerate() {
            let key = format!("{RR}.quotas[{i}]");
            token(&q.name, &format!("{key}.name"))?;
            ensure(
                seen.insert(q.name.as_str()),
                &format!("{key}.name"),
                format!("{:?} is used by another quota", q.name),
            )?;
            ensure(
                (1..=65_535).contains(&q.limit),
                &format!("{key}.limit"),
                format!("must be between 1 and 65535 (got {})", q.limit),
            )?;
            ensure(
                q.window.get() >= std::time::Duration::from_secs(1),
                &format!("{key}.window"),
                "must be at least 1s",
            )?;
            for (j, route) in q.routes.iter().enumerate() {
                RoutePattern::parse(route)
                    .map_err(|m| ConfigError::invalid(format!("{key}.routes[{j}]"), m))?;
            }
        }
        ensure(
            self.quotas.len() <= 16,
            &format!("{RR}.quotas"),
            "may list at most 16 quotas",
        )
    }
}

impl ConcurrentRequestsConfig {
    pub(crate) fn validate(&self) -> Check {
        let key = "limiters.concurrent_requests";
        ensure(
            self.max_in_flight >= 1,
            &format!("{key}.max_in_flight"),
            "must be at least 1",
        )?;
        ensure(
            !self.retry_after.get().is_zero(),
            &format!("{key}.retry_after"),
            "must be greater than zero",
        )?;
        ensure(
            (8..=1 << 30).contains(&self.max_keys),
            &format!("{key}.max_keys"),
            format!("must be between 8 and 1073741824 (got {})", self.max_keys),
        )
    }
}

impl FleetUsageConfig {
    pub(crate) fn validate(&self) -> Check {
        let key = "limiters.fleet_usage";
        ensure(
            self.capacity >= 1,
            &format!("{key}.capacity"),
            "must be at least 1",
        )?;
        ratio(
            self.reserved_for_critical,
            &format!("{key}.reserved_for_critical"),
        )?;
        ensure(
            self.reserved_for_critical < 1.0,
            &format!("{key}.reserved_for_critical"),
            "must be less than 1 (non-critical traffic needs some capacity)",
        )?;
        ensure(
            !self.retry_after.get().is_zero(),
            &format!("{key}.retry_after"),
            "must be greater than zero",
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn refused(yaml: &str) -> String {
        Config::from_yaml_str(yaml).unwrap_err().to_string()
    }

    #[test]
    fn rate_must_be_positive_and_costs_within_burst() {
        let e = refused("limiters:\n  request_rate:\n    rate: 0\n");
        assert!(
            e.starts_with("limiters.request_rate.rate must be greater than 0"),
            "{e}"
        );
        let e = refused(
            "limiters:\n  request_rate:\n    burst: 10\n    costs:\n      \"POST /v1/x\": 20\n",
        );
        assert!(
            e.starts_with("limiters.request_rate.costs[\"POST /v1/x\"] is 20"),
            "{e}"
        );
        let e = refused("limiters:\n  request_rate:\n    costs:\n      \"nonsense\": 2\n");
        assert!(
            e.starts_with("limiters.request_rate.costs[\"nonsense\"]"),
            "{e}"
        );
    }

    #[test]
    fn plans_are_checked_against_their_own_burst() {
        let e = refused("limiters:\n  request_rate:\n    costs:\n      \"POST /v1/x\": 20\n    plans:\n      free:\n        rate: 1\n        burst: 5\n");
        assert!(
            e.starts_with("limiters.request_rate.plans.free.costs"),
            "{e}"
        );
        let e = refused("limiters:\n  request_rate:\n    plans:\n      \"bad name\":\n        rate: 1\n        burst: 5\n");
        assert!(
            e.starts_with("limiters.request_rate.plans.bad name must be"),
            "{e}"
        );
    }

    #[test]
    fn quotas_are_checked() {
        let e = refused("limiters:\n  request_rate:\n    quotas:\n      - {name: a, algorithm: fixed_window, limit: 0, window: 1d}\n");
        assert!(
            e.starts_with("limiters.request_rate.quotas[0].limit"),
            "{e}"
        );
        let e = refused("limiters:\n  request_rate:\n    quotas:\n      - {name: a, algorithm: fixed_window, limit: 3, window: 1d}\n      - {name: a, algorithm: sliding_window, limit: 3, window: 1d}\n");
        assert!(e.starts_with("limiters.request_rate.quotas[1].name"), "{e}");
        let e = refused("limiters:\n  request_rate:\n    quotas:\n      - {name: a, algorithm: leaky, limit: 3, window: 1d}\n");
        assert!(e.contains("leaky"), "{e}");
    }

    #[test]
    fn fleet_and_concurrency_bounds() {
        let e = refused("limiters:\n  fleet_usage:\n    reserved_for_critical: 1.0\n");
        assert!(
            e.starts_with("limiters.fleet_usage.reserved_for_critical"),
            "{e}"
        );
        let e = refused("limiters:\n  concurrent_requests:\n    max_in_flight: 0\n");
        assert!(
            e.starts_with("limiters.concurrent_requests.max_in_flight"),
            "{e}"
        );
        let ok = Config::from_yaml_str(
            "limiters:\n  fleet_usage:\n    capacity: 10\n    reserved_for_critical: 0.2\n",
        )
        .unwrap();
        assert_eq!(ok.limiters.fleet_usage.non_critical_limit(), 8);
    }

    #[test]
    fn underscored_numbers_parse() {
        let c =
            Config::from_yaml_str("limiters:\n  request_rate:\n    max_keys: 1_000_000\n").unwrap();
        assert_eq!(c.limiters.request_rate.max_keys, 1_000_000);
    }
}
