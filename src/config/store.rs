//! `store:` (where keyed limiter state lives) and where admin changes apply (`admin.scope`),
//! which depends on it.

use super::validate::{ensure, Check};
use super::{Config, HumanDuration};
use serde::{Deserialize, Serialize};

/// Which backing store keyed limiter state uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StoreKind {
    /// In this process.
    #[default]
    Memory,
    /// Shared through Redis.
    Redis,
}

/// `store:`
///
/// # Examples
/// ```
/// use brownout::config::StoreKind;
/// use brownout::Config;
///
/// // The default: keyed state in this process's memory.
/// assert_eq!(Config::default().store.kind, StoreKind::Memory);
/// let config = Config::from_yaml_str("store:\n  key_prefix: \"shop:\"\n")?;
/// assert_eq!(config.store.key_prefix, "shop:");
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct StoreConfig {
    /// memory | redis.
    pub kind: StoreKind,
    /// Standalone Redis URL.
    pub url: Option<String>,
    /// Redis Cluster seed nodes.
    pub nodes: Vec<String>,
    /// Deadline of each store call.
    pub timeout: HumanDuration,
    /// Prefix of every Redis key.
    pub key_prefix: String,
    /// How long a concurrency permit or fleet slot taken in Redis counts at most: a server
    /// that dies while its requests run never gives them back, and they expire after this.
    pub permit_ttl: HumanDuration,
    /// How the limits in Redis are used: one round trip per request, or local decisions
    /// reconciled with Redis in batches.
    pub sync: StoreSync,
    /// With `sync: local_first`, how often each instance reconciles with Redis.
    pub sync_interval: HumanDuration,
}

/// `store.sync:` — when a request's limits meet Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StoreSync {
    /// Every request asks Redis (one round trip), failing open to local limits.
    #[default]
    PerRequest,
    /// Requests decide on local state; request_rate's buckets are reconciled with Redis
    /// every `sync_interval` (no network on the request path; a bounded overshoot).
    LocalFirst,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            kind: StoreKind::Memory,
            url: None,
            nodes: Vec::new(),
            timeout: HumanDuration::from_millis(5),
            key_prefix: "brownout:".into(),
            permit_ttl: HumanDuration::from_secs(60),
            sync: StoreSync::PerRequest,
            sync_interval: HumanDuration::from_millis(100),
        }
    }
}

/// `admin.scope:` — where an admin change applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdminScope {
    /// This instance only.
    Local,
    /// Every instance sharing the Redis store: changes are one versioned document in Redis.
    Fleet,
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

    pub(super) fn validate_store(&self) -> Check {
        let s = &self.store;
        ensure(
            !s.timeout.get().is_zero(),
            "store.timeout",
            "must be greater than zero",
        )?;
        ensure(
            s.timeout.get() <= std::time::Duration::from_secs(1),
            "store.timeout",
            "must be at most 1s (it bounds every request's wait for Redis)",
        )?;
        ensure(
            s.permit_ttl.get() >= std::time::Duration::from_secs(1)
                && s.permit_ttl.get() <= std::time::Duration::from_secs(86_400),
            "store.permit_ttl",
            "must be between 1s and 24h",
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
        let interval = s.sync_interval.get();
        ensure(
            interval >= std::time::Duration::from_millis(10)
                && interval <= std::time::Duration::from_secs(10),
            "store.sync_interval",
            "must be between 10ms and 10s",
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
