//! `limiters.adaptive_concurrency:` — the fast guard's settings, with their validation.

use crate::schema::validate::{duration, ensure, share, Valid, MS_TO_A_DAY};
use crate::schema::{HumanDuration, Mode};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `limiters.adaptive_concurrency:` — a learned limit on requests in flight (critical ones
/// count, and are refused only past `critical_ceiling` times the limit, by cohort).
///
/// # Examples
/// ```
/// use brownout::{Config, Mode};
///
/// let config = Config::from_yaml_str(
///     "limiters:\n  adaptive_concurrency:\n    mode: enforce\n    initial_limit: 32\n    window: 250ms\n",
/// )?;
/// let ac = &config.limiters.adaptive_concurrency;
/// assert_eq!((ac.mode, ac.initial_limit), (Mode::Enforce, 32));
/// assert_eq!(ac.window.get(), std::time::Duration::from_millis(250));
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct AdaptiveConcurrencyConfig {
    /// enforce | dark | off.
    pub mode: Mode,
    /// The limit before anything is learned, and where quiet windows (nothing refused,
    /// requests within tolerance) bring a smaller limit back to.
    pub initial_limit: u32,
    /// The limit never goes below this (it is also the limit while the floor is measured).
    pub min_limit: u32,
    /// The limit never goes above this.
    pub max_limit: u32,
    /// How much slower than the floor latency requests may get before the limit shrinks
    /// (1.25: a quarter slower).
    pub tolerance: f64,
    /// How often the limit is updated from the latencies of the requests that finished.
    pub window: HumanDuration,
    /// How long a floor (the latency without queueing) is trusted; after that, while the limit
    /// keeps binding, it is measured again by admitting only `min_limit` for two windows (at
    /// once when requests at `min_limit` take twice the floor: the server got slower).
    pub floor_window: HumanDuration,
    /// Share of the limit that GET requests may use (POST may use all of it); refusals come in
    /// tier order: test first, then get, then post.
    pub get_share: f64,
    /// Share of the limit that test-mode requests may use.
    pub test_share: f64,
    /// Once a tier is refused, every lower tier is refused for this long (0s: never), even with
    /// room in its share, while at least half that share is in flight: a tier is never served
    /// while a higher one was just turned away and the app is still busy. The
    /// refusals count as the limit binding, so the limit grows while they leave workers idle.
    pub tier_hold: HumanDuration,
    /// How many requests without room may wait for one (0: none wait, they are refused at
    /// once). A freed slot goes to the highest tier waiting; a request that has to wait turns
    /// the lower tiers waiting away, and no lower tier passes it. Only the middleware waits.
    pub queue: u32,
    /// The longest a GET or test request waits for room before it is refused.
    pub max_wait: HumanDuration,
    /// The longest a POST waits for room (longer than a GET: it is refused only when every
    /// lower tier has been turned away and the requests let in before it still fill the limit).
    pub post_max_wait: HumanDuration,
    /// Critical requests are never refused while fewer than this many times the limit (once
    /// the capacity is learned, at least it and 0.5 s of queue) are in flight; past it, the critical demand alone is more than the server can answer in time,
    /// and the excess is refused at once, by cohort: the clients whose cohort score is above an
    /// admitted share (which falls while the ceiling is hit and comes back once it is not) are
    /// refused, so the same clients keep being served. `0`: critical requests are never
    /// refused, however many wait in the app.
    pub critical_ceiling: f64,
    /// How long the same clients' critical requests are the ones refused past the ceiling
    /// before the cohorts are drawn anew.
    pub cohort_rotation: HumanDuration,
    /// `Retry-After` of a rejected request.
    pub retry_after: HumanDuration,
}

impl Default for AdaptiveConcurrencyConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Enforce,
            initial_limit: 100,
            min_limit: 1,
            max_limit: 1000,
            tolerance: 1.25,
            window: HumanDuration::from_millis(250),
            floor_window: HumanDuration::from_secs(30),
            get_share: 0.9,
            test_share: 0.8,
            tier_hold: HumanDuration::from_secs(1),
            queue: 32,
            max_wait: HumanDuration::from_millis(250),
            post_max_wait: HumanDuration::from_millis(400),
            critical_ceiling: 4.0,
            cohort_rotation: HumanDuration::from_secs(300),
            retry_after: HumanDuration::from_secs(1),
        }
    }
}

impl AdaptiveConcurrencyConfig {
    pub(crate) fn validate(&self) -> Valid {
        let key = |k: &str| format!("limiters.adaptive_concurrency.{k}");
        ensure(self.min_limit >= 1, &key("min_limit"), "must be at least 1")?;
        ensure(
            self.max_limit >= self.min_limit,
            &key("max_limit"),
            format!("must be at least min_limit ({})", self.min_limit),
        )?;
        ensure(
            (self.min_limit..=self.max_limit).contains(&self.initial_limit),
            &key("initial_limit"),
            format!(
                "must be between min_limit and max_limit ({} to {}, got {})",
                self.min_limit, self.max_limit, self.initial_limit
            ),
        )?;
        ensure(
            self.tolerance.is_finite() && (1.0..=10.0).contains(&self.tolerance),
            &key("tolerance"),
            format!("must be between 1 and 10 (got {})", self.tolerance),
        )?;
        let window = self.window.get();
        ensure(
            (Duration::from_millis(10)..=Duration::from_secs(10)).contains(&window),
            &key("window"),
            format!("must be between 10ms and 10s (got {})", self.window),
        )?;
        ensure(
            self.floor_window.get() >= window * 4,
            &key("floor_window"),
            format!("must be at least four windows ({} each)", self.window),
        )?;
        duration(
            self.floor_window.get(),
            &key("floor_window"),
            (window * 4, Duration::from_secs(3600)),
        )?;
        share(self.get_share, &key("get_share"))?;
        share(self.test_share, &key("test_share"))?;
        ensure(
            self.test_share <= self.get_share,
            &key("test_share"),
            "must not exceed get_share (test traffic is refused before GETs)",
        )?;
        ensure(
            self.tier_hold.get() <= Duration::from_secs(60),
            &key("tier_hold"),
            format!("must be at most 60s (got {})", self.tier_hold),
        )?;
        ensure(
            self.queue <= 100_000,
            &key("queue"),
            format!("must be at most 100000 (got {})", self.queue),
        )?;
        for (name, wait) in [
            ("max_wait", self.max_wait),
            ("post_max_wait", self.post_max_wait),
        ] {
            ensure(
                (Duration::from_millis(1)..=Duration::from_secs(10)).contains(&wait.get()),
                &key(name),
                format!("must be between 1ms and 10s (got {wait})"),
            )?;
        }
        ensure(
            self.critical_ceiling == 0.0
                || (self.critical_ceiling.is_finite()
                    && (1.0..=100.0).contains(&self.critical_ceiling)),
            &key("critical_ceiling"),
            format!(
                "must be 0 (never refuse critical requests) or between 1 and 100 (got {})",
                self.critical_ceiling
            ),
        )?;
        duration(self.cohort_rotation.get(), &key("cohort_rotation"), MS_TO_A_DAY)?;
        duration(self.retry_after.get(), &key("retry_after"), MS_TO_A_DAY)
    }

    /// The longest a request of `tier` waits for room.
    pub fn max_wait_for(&self, tier: crate::tier::Tier) -> Duration {
        match tier {
            crate::tier::Tier::Post => self.post_max_wait.get(),
            _ => self.max_wait.get(),
        }
    }

    /// Requests of a tier's share that may be in flight under `limit`: `None` for critical
    /// requests, which this limiter counts and refuses only past `critical_ceiling`.
    pub fn tier_limit(&self, limit: f64, tier: crate::tier::Tier) -> Option<f64> {
        use crate::tier::Tier;
        match tier {
            Tier::Critical => None,
            Tier::Post => Some(limit),
            Tier::Get => Some(limit * self.get_share),
            Tier::Test => Some(limit * self.test_share),
        }
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
