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
mod tests {
    use super::*;

    #[test]
    fn a_route_cost_without_a_rate_limit_is_refused_in_one_sentence() {
        let e = Config::builder()
            .route_cost("POST /v1/charges", 5)
            .build()
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "limiters.request_rate.costs would have no effect: request_rate is off; call rate_limit(per_second, burst) too"
        );
        let both = Config::builder()
            .route_cost("POST /v1/charges", 5)
            .rate_limit(1.0, 10);
        assert!(both.build().is_ok(), "in either order");
    }

    #[test]
    fn a_per_ip_ceiling_without_a_rate_limit_is_refused_and_with_one_it_replaces_the_auto_one() {
        let e = Config::builder()
            .per_ip(2.0, 5)
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("limiters.request_rate.per_ip would have no effect"),
            "{e}"
        );
        let rr = |b: ConfigBuilder| b.build().unwrap().limiters.request_rate;
        let auto = rr(Config::builder().rate_limit(20.0, 100));
        assert_eq!(
            auto.ceiling(),
            Some(super::super::PerIpConfig::new(200.0, 1_000))
        );
        let set = rr(Config::builder().per_ip(2.0, 5).rate_limit(20.0, 100));
        assert_eq!(set.ceiling(), Some(super::super::PerIpConfig::new(2.0, 5)));
        let off = rr(Config::builder().rate_limit(20.0, 100).no_per_ip());
        assert_eq!(off.ceiling(), None);
        assert!(
            Config::builder().no_per_ip().build().is_ok(),
            "off is never in the way"
        );
    }

    #[test]
    fn the_builder_says_what_the_file_says() {
        let yaml = "limiters:\n  request_rate:\n    mode: enforce\n    rate: 20\n    burst: 100\n    costs: { \"POST /v1/charges\": 5 }\n  concurrent_requests:\n    mode: enforce\n    max_in_flight: 10\n  fleet_usage:\n    mode: enforce\n    capacity: 100\n    reserved_for_critical: 0.2\n  adaptive_concurrency:\n    mode: enforce\n  worker_utilization:\n    capacity: 16\nclassifier:\n  critical: [\"POST /v1/charges\", \"POST /v1/payouts\"]\n";
        let built = Config::builder()
            .rate_limit(20.0, 100)
            .route_cost("POST /v1/charges", 5)
            .concurrent_requests(10)
            .reserve_for_critical(100, 0.2)
            .fast_guard()
            .capacity(16)
            .critical_route("POST /v1/charges")
            .critical_route("POST /v1/payouts")
            .build()
            .unwrap();
        assert_eq!(built, Config::from_yaml_str(yaml).unwrap());
    }

    #[test]
    fn a_mistake_is_refused_with_the_files_message() {
        let cases: [(ConfigBuilder, &str); 4] = [
            (
                Config::builder().rate_limit(f64::NAN, 1),
                "limiters:\n  request_rate:\n    mode: enforce\n    rate: .nan\n    burst: 1\n",
            ),
            (
                Config::builder().concurrent_requests(0),
                "limiters:\n  concurrent_requests:\n    mode: enforce\n    max_in_flight: 0\n",
            ),
            (
                Config::builder().reserve_for_critical(10, 1.5),
                "limiters:\n  fleet_usage:\n    mode: enforce\n    capacity: 10\n    reserved_for_critical: 1.5\n",
            ),
            (
                Config::builder().critical_route("nope"),
                "classifier:\n  critical: [nope]\n",
            ),
        ];
        for (builder, yaml) in cases {
            let from_code = builder.build().unwrap_err().to_string();
            let from_file = Config::from_yaml_str(yaml).unwrap_err().to_string();
            // The file's message may add where the key is; the rest is the same.
            let without_line = |m: &str| m.split(" (line").next().unwrap().to_owned();
            assert_eq!(without_line(&from_code), without_line(&from_file));
            assert!(from_code.starts_with("limiters.") || from_code.starts_with("classifier."));
        }
    }
}
