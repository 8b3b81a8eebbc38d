//! `store:` (where keyed limiter state lives) and where admin changes apply (`admin.scope`),
//! which depends on it.

use super::HumanDuration;
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
