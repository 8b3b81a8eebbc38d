//! The live settings as one part of the engine: read by every request without a lock, replaced
//! as a whole by the operator, and announced to the actors whose timers follow them.

use super::Settings;
use crate::metrics::Metrics;
use arc_swap::{ArcSwap, Guard};
use std::sync::Arc;
use tokio::sync::watch;

/// The settings every request reads, and who is told when they change.
pub(crate) struct SettingsCell {
    live: ArcSwap<Settings>,
    /// The version of the settings, announced after every change: the sampler and the evictor
    /// re-arm their timers at once.
    changed: watch::Sender<u64>,
}

impl SettingsCell {
    /// A cell holding `settings`.
    pub(crate) fn new(settings: Settings) -> Self {
        let version = settings.version;
        Self {
            live: ArcSwap::from_pointee(settings),
            changed: watch::Sender::new(version),
        }
    }

    /// The settings in force (a lock-free load, held for one decision).
    #[inline]
    pub(crate) fn load(&self) -> Guard<Arc<Settings>> {
        self.live.load()
    }

    /// The settings in force, to keep.
    #[inline]
    pub(crate) fn load_full(&self) -> Arc<Settings> {
        self.live.load_full()
    }

    /// The cell itself, for a per-worker [`arc_swap::cache::Cache`].
    // The actix middleware's (the tower layer has its own cache).
    #[cfg_attr(not(feature = "actix"), allow(dead_code))]
    #[inline]
    pub(crate) fn swap(&self) -> &ArcSwap<Settings> {
        &self.live
    }

    /// Puts `settings` in force: every request after this reads them; what the metrics show
    /// of them (modes, kill switch, version, the controller's thresholds) is published to
    /// `metrics` ([`Settings::publish`]), and the actors told.
    pub(crate) fn replace(&self, settings: Settings, metrics: &Metrics) {
        let settings = Arc::new(settings);
        self.live.store(settings.clone());
        settings.publish(metrics);
        self.changed.send_replace(settings.version);
    }

    /// Told of every change (the version in force).
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}
