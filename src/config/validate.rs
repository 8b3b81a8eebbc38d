//! Validation of a parsed [`Config`] as a whole: its sections in order, each refusal naming
//! its key (each limiter's block is checked in its own module, `crate::limiter::<name>`).

use super::Config;
use crate::schema::validate::{duration, ensure, Valid};
use crate::schema::MAX_FORWARDED_LINES;
use crate::schema::{AdminScope, ConfigError, RoutePattern, StoreKind, StoreSync};
use std::net::SocketAddr;
use std::time::Duration;

fn address(value: &str, key: &str) -> Valid {
    ensure(
        value.parse::<SocketAddr>().is_ok(),
        key,
        format!("must be an IP address and port like 127.0.0.1:9090 (got {value:?})"),
    )
}

impl Config {
    /// Checks every setting; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        address(&self.admin.bind, "admin.bind")?;
        ensure(
            !self.admin.token_env.is_empty(),
            "admin.token_env",
            "must name an environment variable",
        )?;
        duration(
            self.admin.body_timeout.get(),
            "admin.body_timeout",
            (Duration::from_millis(10), Duration::from_secs(300)),
        )?;
        for (i, route) in self.classifier.critical.iter().enumerate() {
            RoutePattern::parse(route)
                .map_err(|m| ConfigError::invalid(format!("classifier.critical[{i}]"), m))?;
        }
        ensure(
            (1..=MAX_FORWARDED_LINES as u32).contains(&self.classifier.forwarded_for_hops),
            "classifier.forwarded_for_hops",
            format!(
                "must be between 1 and {MAX_FORWARDED_LINES} (got {})",
                self.classifier.forwarded_for_hops
            ),
        )?;
        ensure(
            self.classifier
                .test_key_prefix
                .as_ref()
                .is_none_or(|p| !p.is_empty()),
            "classifier.test_key_prefix",
            "must not be empty (every key would be a test key); leave it out for no test keys",
        )?;
        self.limiters.validate()?;
        self.validate_store()
    }
}

impl Config {
    /// Where admin changes apply: `admin.scope`, or by default `fleet` with a Redis store and
    /// `local` without one.
    pub fn admin_scope(&self) -> AdminScope {
        self.admin.scope.unwrap_or(match self.store.kind {
            StoreKind::Redis => AdminScope::Fleet,
            StoreKind::Memory => AdminScope::Local,
        })
    }

    pub(super) fn validate_store(&self) -> Valid {
        let s = &self.store;
        duration(
            s.timeout.get(),
            "store.timeout",
            (Duration::from_millis(1), Duration::from_secs(1)),
        )?;
        duration(
            s.permit_ttl.get(),
            "store.permit_ttl",
            (Duration::from_secs(1), Duration::from_secs(86_400)),
        )?;
        if s.kind == StoreKind::Redis {
            // Fleet mode talks to Redis through the redis crate: only with the feature.
            ensure(
                cfg!(feature = "redis"),
                "store.kind",
                "is redis, which needs brownout's `redis` feature: add features = [\"redis\"] to \
                 brownout's line in Cargo.toml, or use memory",
            )?;
            ensure(
                s.url.is_some() == s.nodes.is_empty(),
                "store.url",
                "or store.nodes (a Redis Cluster's seed nodes) is required when store.kind is redis, not both",
            )?;
            let urls = s.url.iter().map(|u| ("store.url", u));
            for (key, url) in urls.chain(s.nodes.iter().map(|u| ("store.nodes", u))) {
                ensure(
                    url.starts_with("redis://")
                        || (key == "store.url"
                            && (url.starts_with("redis+unix://") || url.starts_with("unix://"))),
                    key,
                    "must be a redis:// URL; TLS (rediss://) is not built into this version",
                )?;
            }
        }
        duration(
            s.sync_interval.get(),
            "store.sync_interval",
            (Duration::from_millis(10), Duration::from_secs(10)),
        )?;
        ensure(
            s.sync == StoreSync::PerRequest || s.kind == StoreKind::Redis,
            "store.sync",
            "local_first needs store.kind: redis (it reconciles with Redis)",
        )?;
        ensure(
            self.admin_scope() == AdminScope::Local || s.kind == StoreKind::Redis,
            "admin.scope",
            "fleet needs store.kind: redis (the fleet's settings live in Redis)",
        )?;
        ensure(
            self.admin
                .instance
                .as_ref()
                .is_none_or(|i| (1..=64).contains(&i.len()) && !i.chars().any(char::is_control)),
            "admin.instance",
            "must be 1 to 64 printable characters",
        )
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
