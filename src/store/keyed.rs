//! The engine's keyed state as one part: the store the per-key limiters decide on here, and,
//! in fleet mode, the shared store behind it and how the two work together (`store.sync`).

#[cfg(feature = "redis")]
use super::redis::RedisStore;
#[cfg(feature = "redis")]
use super::HybridStore;
use super::Store;
use crate::math::window::WindowRule;
use std::sync::Arc;

/// Where the per-key limiters keep their state.
pub(crate) struct Keyed {
    /// What the chain decides on here: the in-memory store, an app's own, or with
    /// `local_first` the hybrid store (local buckets reconciled with Redis in rounds).
    local: Arc<dyn Store>,
    /// The shared store (fleet mode).
    #[cfg(feature = "redis")]
    shared: Option<Arc<RedisStore>>,
    /// With `store.sync: local_first`: `local` itself, as the hybrid store it is.
    #[cfg(feature = "redis")]
    hybrid: Option<Arc<HybridStore>>,
}

impl Keyed {
    /// Keyed state kept in `local` alone.
    pub(crate) fn local_only(local: Arc<dyn Store>) -> Self {
        Self {
            local,
            #[cfg(feature = "redis")]
            shared: None,
            #[cfg(feature = "redis")]
            hybrid: None,
        }
    }

    /// Fleet mode: `local` decides when `shared` cannot answer; with `hybrid` (local_first),
    /// requests never ask `shared` and `hybrid` is reconciled with it in rounds.
    #[cfg(feature = "redis")]
    pub(crate) fn fleet(
        local: Arc<dyn Store>,
        shared: Arc<RedisStore>,
        hybrid: Option<Arc<HybridStore>>,
    ) -> Self {
        Self {
            local,
            shared: Some(shared),
            hybrid,
        }
    }

    /// The store the chain decides on here.
    #[inline]
    pub(crate) fn local(&self) -> &dyn Store {
        &*self.local
    }

    /// The shared store, in fleet mode.
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn shared(&self) -> Option<&Arc<RedisStore>> {
        self.shared.as_ref()
    }

    /// The shared store every request asks first (fleet mode, `store.sync: per_request`).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn per_request(&self) -> Option<&Arc<RedisStore>> {
        self.shared.as_ref().filter(|_| self.hybrid.is_none())
    }

    /// The hybrid store (`store.sync: local_first`).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn hybrid(&self) -> Option<&Arc<HybridStore>> {
        self.hybrid.as_ref()
    }

    /// Drops idle local state at `now` µs (and `unix_now` µs since the epoch).
    pub(crate) fn evict_idle(&self, now: u64, unix_now: u64, quota_rules: &[WindowRule]) {
        self.local.evict_idle(now, unix_now, quota_rules);
    }
}
