//! [`ConfigBuilder`]: the configuration from code, validated exactly as config.yaml is.

use super::{Config, ConfigError, LimitersConfig, Mode};

/// Builds a [`Config`] from code; [`build`](Self::build) validates it exactly as a file is
/// validated, with the same messages (naming the same keys).
///
/// It starts from the defaults: worker_utilization (Stripe's controller) enforcing with a
/// `capacity` of 64 requests in flight, every other limiter off. Each method below turns one
/// limiter on (enforcing) with the numbers given; [`limiters`](Self::limiters) and
/// [`with`](Self::with) reach every other setting.
///
/// # Examples
/// A per-key rate limit of 20 requests a second with bursts of 100, where a charge costs 5,
/// beside the default overload protection:
/// ```
/// use brownout::Config;
///
/// let config = Config::builder()
///     .rate_limit(20.0, 100)
///     .route_cost("POST /v1/charges", 5)
///     .build()?;
/// assert_eq!(config.limiters.request_rate.costs["POST /v1/charges"], 5);
/// # Ok::<(), brownout::config::ConfigError>(())
/// ```
/// A mistake is refused as the file would refuse it:
/// ```
/// let err = brownout::Config::builder().rate_limit(-1.0, 100).build().unwrap_err();
/// assert!(err.to_string().starts_with("limiters.request_rate.rate"));
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "call build() to get the Config"]
pub struct ConfigBuilder {
    config: Config,
}

impl Config {
    /// A builder starting from the defaults (see [`ConfigBuilder`]).
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }
}

impl ConfigBuilder {
    /// request_rate, enforcing: each client key may spend `per_second` credits a second and
    /// hold at most `burst` (a request costs 1 unless [`route_cost`](Self::route_cost) says
    /// otherwise).
    pub fn rate_limit(mut self, per_second: f64, burst: u32) -> Self {
        let r = &mut self.config.limiters.request_rate;
        (r.mode, r.rate, r.burst) = (Mode::Enforce, per_second, burst);
        self
    }

    /// The ceiling per client address (IPv6 by /64) that request_rate's clients also spend
    /// from, whatever key they send: `per_second` credits a second, at most `burst` held.
    /// Without it, the ceiling is [`PerIp::Auto`](super::PerIp::Auto): ten times the largest
    /// plan's. It takes effect with request_rate on ([`rate_limit`](Self::rate_limit)).
    pub fn per_ip(mut self, per_second: f64, burst: u32) -> Self {
        let limit = super::PerIpConfig::new(per_second, burst);
        self.config.limiters.request_rate.per_ip = limit.into();
        self
    }

    /// No ceiling per client address: each key is limited on its own, however many one
    /// address sends (for a network whose clients cannot invent keys, or a benchmark).
    pub fn no_per_ip(mut self) -> Self {
        self.config.limiters.request_rate.per_ip = super::PerIp::Off;
        self
    }

    /// What a route costs request_rate: `route` is `"METHOD /path"` (`{param}` matches one
    /// segment; the most specific pattern wins), as in the file's `costs`.
    pub fn route_cost(mut self, route: impl Into<String>, cost: u32) -> Self {
        let costs = &mut self.config.limiters.request_rate.costs;
        costs.insert(route.into(), cost);
        self
    }

    /// concurrent_requests, enforcing: at most `max_in_flight` requests in progress per key.
    pub fn concurrent_requests(mut self, max_in_flight: u32) -> Self {
        let c = &mut self.config.limiters.concurrent_requests;
        (c.mode, c.max_in_flight) = (Mode::Enforce, max_in_flight);
        self
    }

    /// fleet_usage, enforcing: of `capacity` requests in flight, `reserved_for_critical` (a
    /// share, e.g. 0.2) is kept for critical requests.
    pub fn reserve_for_critical(mut self, capacity: u32, reserved_for_critical: f64) -> Self {
        let f = &mut self.config.limiters.fleet_usage;
        (f.mode, f.capacity, f.reserved_for_critical) =
            (Mode::Enforce, capacity, reserved_for_critical);
        self
    }

    /// Marks requests matching `route` (`"METHOD /path"`) critical, besides those already
    /// marked (none by default): never shed by the load limiters (the file's
    /// `classifier.critical`).
    pub fn critical_route(mut self, route: impl Into<String>) -> Self {
        let (route, critical) = (route.into(), &mut self.config.classifier.critical);
        if !critical.contains(&route) {
            critical.push(route);
        }
        self
    }

    /// API keys (`Authorization: Bearer <key>`) starting with `prefix` are test-mode traffic,
    /// the first shed (the file's `classifier.test_key_prefix`; none by default).
    pub fn test_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.classifier.test_key_prefix = Some(prefix.into());
        self
    }

    /// The requests the app serves at once (its workers): worker_utilization's `capacity`.
    pub fn capacity(mut self, requests_in_flight: u32) -> Self {
        self.config.limiters.worker_utilization.capacity = Some(requests_in_flight);
        self
    }

    /// adaptive_concurrency (the fast guard), enforcing with its defaults.
    pub fn fast_guard(mut self) -> Self {
        self.config.limiters.adaptive_concurrency.mode = Mode::Enforce;
        self
    }

    /// Any limiter setting, as the file's `limiters:` block has it.
    pub fn limiters(mut self, f: impl FnOnce(&mut LimitersConfig)) -> Self {
        f(&mut self.config.limiters);
        self
    }

    /// Any setting at all.
    pub fn with(mut self, f: impl FnOnce(&mut Config)) -> Self {
        f(&mut self.config);
        self
    }

    /// The configuration, validated as a file is.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key of the first problem, with the file's message.
    /// Also refused: what would have no effect, such as route costs or a per-IP ceiling with
    /// request_rate off.
    pub fn build(self) -> Result<Config, ConfigError> {
        let rate = &self.config.limiters.request_rate;
        if rate.mode == Mode::Off && !rate.costs.is_empty() {
            return Err(ConfigError::invalid(
                "limiters.request_rate.costs",
                "would have no effect: request_rate is off; call rate_limit(per_second, burst) too",
            ));
        }
        if rate.mode == Mode::Off && matches!(rate.per_ip, super::PerIp::Limit(_)) {
            return Err(ConfigError::invalid(
                "limiters.request_rate.per_ip",
                "would have no effect: the ceiling is part of request_rate, which is off; call rate_limit(per_second, burst) too",
            ));
        }
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
#[path = "builder_tests.rs"]
mod tests;
