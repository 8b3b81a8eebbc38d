//! What `/v1/state` shows of where an instance's settings come from.

use crate::config::{AdminScope, Config};
use serde::Serialize;

/// What `/v1/state` shows of this instance's settings: `settings` there.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FleetStatus {
    /// `fleet` or `local` (`admin.scope`).
    pub(crate) scope: &'static str,
    /// This instance's name (`admin.instance`).
    pub(crate) instance: String,
    /// The fleet's settings version this instance last applied or wrote (0: none yet).
    pub(crate) fleet_version: u64,
    /// Whether the last read or write of the fleet's settings succeeded, and the channel
    /// that announces them is subscribed since.
    pub(crate) connected: bool,
    /// Changes made here while Redis was unreachable, not (yet) the fleet's.
    pub(crate) local_changes: bool,
    /// The fleet's latest version, when this instance refused it (and why); it keeps its
    /// settings.
    pub(crate) refused: Option<(u64, String)>,
}

impl FleetStatus {
    /// The status before anything is read.
    pub(crate) fn new(config: &Config) -> Self {
        let scope = match config.admin_scope() {
            AdminScope::Fleet => "fleet",
            AdminScope::Local => "local",
        };
        Self {
            scope,
            instance: config
                .admin
                .instance
                .clone()
                .unwrap_or_else(default_instance),
            fleet_version: 0,
            connected: false,
            local_changes: false,
            refused: None,
        }
    }

    /// Whether this instance runs the fleet's settings.
    pub(crate) fn in_sync(&self) -> bool {
        self.scope == "local" || (self.connected && !self.local_changes && self.refused.is_none())
    }
}

/// The host name and process id.
fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}-{}", std::process::id())
}
