//! `limiters.request_rate:` — the request-rate limiter's settings: its bucket, plans, per-IP
//! bucket and quotas (validated in `validate.rs`).

use crate::schema::{HumanDuration, Mode, QuotaAlgorithm};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `limiters.request_rate:` — a per-key token bucket of credits with weighted endpoint costs.
///
/// # Examples
/// ```
/// use brownout::{Config, Mode};
///
/// let config = Config::from_yaml_str(
///     "limiters:
///   request_rate:
///     mode: enforce
///     rate: 20
///     burst: 100
///     costs:
///       \"POST /v1/charges\": 5
/// ",
/// )?;
/// let rr = &config.limiters.request_rate;
/// assert_eq!((rr.mode, rr.rate, rr.burst), (Mode::Enforce, 20.0, 100));
/// assert_eq!(rr.costs["POST /v1/charges"], 5);
///
/// // The same from code: fields on the default, then the file's validation.
/// let mut from_code = Config::default();
/// let rr = &mut from_code.limiters.request_rate;
/// rr.mode = Mode::Enforce;
/// rr.rate = 20.0;
/// rr.burst = 100;
/// rr.costs.insert("POST /v1/charges".into(), 5);
/// from_code.validate()?;
/// assert_eq!(from_code.limiters.request_rate, config.limiters.request_rate);
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
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
    /// A ceiling per client IP (IPv6 by /64) that every request also spends from, whatever
    /// API key it carries: bearer keys are unverified, so without it one client can invent
    /// a fresh key per request. On by default ([`PerIp::Auto`]: ten times the largest
    /// plan's rate and burst).
    pub per_ip: PerIp,
    /// A request over its client's bucket: refused (429), or held for its turn (a queue)
    /// if that comes within `max_delay`.
    pub excess: Excess,
    /// With `excess: delay`, the longest a request is held (longer: refused), so a client has
    /// at most `max_delay × rate ÷ cost` waiting.
    pub max_delay: HumanDuration,
}

/// `limiters.request_rate.excess:` — what a request over its client's bucket gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Excess {
    /// 429 with `Retry-After`.
    #[default]
    Refuse,
    /// Held, off the workers, until its turn (within `max_delay`; else 429).
    Delay,
}

/// `limiters.request_rate.per_ip:` — `auto` (the default), `off`, or `{rate, burst}`.
///
/// # Examples
/// ```
/// use brownout::config::{PerIp, PerIpConfig};
/// use brownout::Config;
///
/// // Left out: ten times the largest plan's rate and burst.
/// let config = Config::from_yaml_str("limiters:\n  request_rate:\n    rate: 20\n")?;
/// let rr = &config.limiters.request_rate;
/// assert_eq!(rr.per_ip, PerIp::Auto);
/// assert_eq!(rr.ceiling(), Some(PerIpConfig::new(200.0, 5_000)));
/// // Turned off (a trusted network whose clients cannot invent keys).
/// let config = Config::from_yaml_str("limiters:\n  request_rate:\n    per_ip: off\n")?;
/// assert_eq!(config.limiters.request_rate.ceiling(), None);
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum PerIp {
    /// Ten times the largest plan's rate and ten times its burst (the default plan included;
    /// times `elastic_factor` too, so that a client's elastic bucket stays below it):
    /// ten busy clients behind one address (a NAT, an office) never meet it, and one address
    /// inventing a key per request gets ten clients' worth, not unlimited.
    #[default]
    Auto,
    /// No ceiling: each API key is limited on its own, however many one address sends.
    Off,
    /// This rate and burst per address.
    Limit(PerIpConfig),
}

impl From<PerIpConfig> for PerIp {
    fn from(limit: PerIpConfig) -> Self {
        Self::Limit(limit)
    }
}

/// How many clients' worth [`PerIp::Auto`] allows one address.
pub const AUTO_PER_IP_CLIENTS: u32 = 10;

impl RequestRateConfig {
    /// The per-IP ceiling in force: [`PerIp::Auto`] resolved against the plans, `None` when
    /// off.
    pub fn ceiling(&self) -> Option<PerIpConfig> {
        match self.per_ip {
            PerIp::Off => None,
            PerIp::Limit(limit) => Some(limit),
            PerIp::Auto => {
                let plans = self.plans.values().map(|p| (p.rate, p.burst));
                let (rate, burst) = std::iter::once((self.rate, self.burst))
                    .chain(plans)
                    .fold((0.0f64, 0u32), |(r, b), (rate, burst)| {
                        (r.max(rate), b.max(burst))
                    });
                // The elastic bucket is a client's too: the ceiling stays above it.
                let clients = f64::from(AUTO_PER_IP_CLIENTS) * self.elastic_factor.max(1.0);
                Some(PerIpConfig::new(
                    rate * clients,
                    (f64::from(burst) * clients).min(f64::from(u32::MAX)) as u32,
                ))
            }
        }
    }
}

impl Serialize for PerIp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Off => s.serialize_str("off"),
            Self::Limit(limit) => limit.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for PerIp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = PerIp;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("section of keys (rate, burst), or auto, or off")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PerIp, E> {
                match v {
                    "auto" => Ok(PerIp::Auto),
                    "off" => Ok(PerIp::Off),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<PerIp, E> {
                // YAML 1.1 reads a bare `off` as false.
                if v {
                    Err(E::invalid_value(serde::de::Unexpected::Bool(v), &self))
                } else {
                    Ok(PerIp::Off)
                }
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, map: M) -> Result<PerIp, M::Error> {
                PerIpConfig::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(PerIp::Limit)
            }
        }
        d.deserialize_any(Either)
    }
}

/// `limiters.request_rate.per_ip:` — a token bucket per client IP.
///
/// # Examples
/// ```
/// use brownout::config::PerIpConfig;
/// use brownout::Config;
///
/// let config = Config::from_yaml_str(
///     "limiters:\n  request_rate:\n    per_ip:\n      rate: 50\n      burst: 200\n",
/// )?;
/// assert_eq!(config.limiters.request_rate.per_ip, PerIpConfig::new(50.0, 200).into());
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PerIpConfig {
    /// Credits regenerated per second.
    pub rate: f64,
    /// Most credits one IP can hold.
    pub burst: u32,
}

impl PerIpConfig {
    /// `rate` credits a second per IP, at most `burst` held.
    pub const fn new(rate: f64, burst: u32) -> Self {
        Self { rate, burst }
    }
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
            per_ip: PerIp::Auto,
            excess: Excess::Refuse,
            max_delay: HumanDuration::from_secs(1),
        }
    }
}

/// `limiters.request_rate.plans.<name>:` — a customer plan.
///
/// # Examples
/// ```
/// use brownout::config::PlanConfig;
/// use brownout::Config;
///
/// let config = Config::from_yaml_str(
///     "limiters:\n  request_rate:\n    plans:\n      free:\n        rate: 5\n        burst: 20\n",
/// )?;
/// assert_eq!(config.limiters.request_rate.plans["free"], PlanConfig::new(5.0, 20));
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
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

impl PlanConfig {
    /// A plan of `rate` credits a second, at most `burst` held, with the default costs.
    pub fn new(rate: f64, burst: u32) -> Self {
        Self {
            rate,
            burst,
            default_cost: None,
            costs: BTreeMap::new(),
        }
    }
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
///
/// # Examples
/// ```
/// use brownout::config::{HumanDuration, QuotaAlgorithm, QuotaConfig, QuotaCount};
/// use brownout::Config;
///
/// let config = Config::from_yaml_str(
///     "limiters:
///   request_rate:
///     quotas:
///       - name: card_failures
///         algorithm: sliding_window
///         limit: 3
///         window: 1d
///         routes: [\"POST /v1/charges\"]
///         count: failures
/// ",
/// )?;
/// let quota = QuotaConfig::new(
///     "card_failures",
///     QuotaAlgorithm::SlidingWindow,
///     3,
///     HumanDuration::from_secs(86_400),
/// )
/// .with_routes(["POST /v1/charges"])
/// .with_count(QuotaCount::Failures);
/// assert_eq!(config.limiters.request_rate.quotas, [quota]);
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
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

impl QuotaConfig {
    /// At most `limit` requests per `window`, counted as `algorithm` says, for every route,
    /// keyed by client and counting every request (set `routes`, `key` and `count` to narrow
    /// it).
    pub fn new(
        name: impl Into<String>,
        algorithm: QuotaAlgorithm,
        limit: u32,
        window: HumanDuration,
    ) -> Self {
        Self {
            name: name.into(),
            algorithm,
            limit,
            window,
            routes: Vec::new(),
            key: default_quota_key(),
            count: default_quota_count(),
        }
    }

    /// Counting only requests to these route patterns (`"METHOD /path/{param}"`).
    pub fn with_routes<S: Into<String>>(mut self, routes: impl IntoIterator<Item = S>) -> Self {
        self.routes = routes.into_iter().map(Into::into).collect();
        self
    }

    /// Keyed by `key` (the client, or its IP even when it has an API key).
    pub fn with_key(mut self, key: QuotaKey) -> Self {
        self.key = key;
        self
    }

    /// Counting `count` (every request, or only failed ones).
    pub fn with_count(mut self, count: QuotaCount) -> Self {
        self.count = count;
        self
    }
}

fn default_quota_key() -> QuotaKey {
    QuotaKey::Client
}

fn default_quota_count() -> QuotaCount {
    QuotaCount::Requests
}
