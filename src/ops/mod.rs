//! Operating brownout at run time: mode changes (kill switches, dark launches) with optional
//! time limits, the global kill switch, JSON merge patches of the limiter settings, reloads of
//! config.yaml, the audit log and the overrides file.
//!
//! Every change is a message to one operator actor, which applies changes one at a time
//! (so `If-Match` checks cannot race), validates the result as a whole exactly like
//! config.yaml, swaps it in through `ArcSwap` (the next request sees it; none fails), audits
//! it, persists it, and owns the timers that revert time-limited changes.

mod audit;
mod operator;
pub(crate) mod patch;
pub(crate) mod persist;
mod reload;
pub(crate) mod restore;

pub(crate) use crate::metrics::Action;
pub use audit::AuditEntry;
pub(crate) use audit::AuditLog;
pub(crate) use operator::{spawn, FleetStatus, OperatorSetup, OpsMsg};
pub(crate) use persist::PendingRevert;
pub(crate) use reload::{reload, send};
#[cfg(unix)]
pub(crate) use reload::{spawn_reloader, ConfigFile};

use crate::config::{Config, ConfigError, LimitersConfig, Mode};
use crate::limiter::LimiterName;
use serde_json::Value;
use std::time::Duration;

/// A change an operator asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Set one limiter's mode, for `ttl` or for good.
    Mode {
        /// The limiter.
        limiter: LimiterName,
        /// enforce, dark or off.
        mode: Mode,
        /// Revert to the previous mode after this long.
        ttl: Option<Duration>,
    },
    /// Turn every limiter off (or back to their modes).
    KillSwitch(bool),
    /// A JSON merge patch (RFC 7396) of the document `GET /v1/config` returns
    /// (`{"kill_switch", "limiters", "version"}`; `version` is read-only), if the settings
    /// are still at `if_match`.
    Patch {
        /// The patch.
        patch: Value,
        /// The version the patch was written against.
        if_match: Option<u64>,
    },
    /// The configuration file was read again: its limiters become the new base (admin changes
    /// stay on top), its classifier and `admin.metrics_auth` apply at once, and any other
    /// section that differs from the running one refuses the reload by name.
    Reload(Box<Config>),
}

impl Change {
    /// The `action` label of `brownout_admin_changes_total` and the audit log.
    pub fn action(&self) -> &'static str {
        match self {
            Change::Mode { .. } => Action::Mode.as_str(),
            Change::KillSwitch(_) => Action::KillSwitch.as_str(),
            Change::Patch { .. } => Action::Patch.as_str(),
            Change::Reload(_) => Action::Reload.as_str(),
        }
    }
}

/// Why a change was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeError {
    /// The result would not be valid settings.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The settings moved on since the version the change was written against.
    #[error("the settings are at version {current}; the change was made against {expected}")]
    Stale {
        /// The version in `If-Match`.
        expected: u64,
        /// The live version.
        current: u64,
    },
    /// The operator actor is not running (`Brownout::start` was not called).
    #[error("brownout is not started, so its settings cannot be changed")]
    NotRunning,
    /// The change could not be written to `admin.overrides_file`, so it was not made: it
    /// would not have survived a restart.
    #[error("the change could not be written to {} (admin.overrides_file): {reason}", path.display())]
    NotPersisted {
        /// The overrides file.
        path: std::path::PathBuf,
        /// The OS error.
        reason: String,
    },
    /// Other instances kept changing the fleet's settings while this change was worked out
    /// again on top of theirs.
    #[error("the fleet's settings kept changing while this change was being made; try again")]
    Contended,
    /// There is no configuration file to reload (built from a `Config`, not a file).
    #[error("there is no configuration file to reload (build with Brownout::from_config_file or BrownoutBuilder::config_file)")]
    NoFile,
}

/// An accepted change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Applied {
    /// The new settings version.
    pub version: u64,
    /// Whether it is the fleet's settings (`admin.scope: fleet`, Redis reachable); `false`:
    /// this instance's only.
    pub fleet: bool,
}

/// Parses limiter settings from JSON, naming the offending field on error.
pub(crate) fn limiters_from_json(doc: Value) -> Result<LimitersConfig, ConfigError> {
    let limiters: LimitersConfig = serde_path_to_error::deserialize(&doc).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." {
            "limiters".to_owned()
        } else {
            format!("limiters.{path}")
        };
        // In the file's words: "must be a number, not \"fifty\"".
        let message = crate::config::describe_json(&e.into_inner().to_string());
        ConfigError::invalid(key, message)
    })?;
    // serde reads a list where a section belongs as the section's keys in order
    // (`{"per_ip": [1, 2]}` as rate 1, burst 2); the file refuses it, and so does this.
    let read = serde_json::to_value(&limiters).unwrap_or(Value::Null);
    match list_for_section(&doc, &read, "limiters") {
        Some(key) => Err(ConfigError::invalid(
            key,
            "must be a section of keys, not a list",
        )),
        None => Ok(limiters),
    }
}

/// The first key where `given` has a list and what it was read as (`read`) is a section.
fn list_for_section(given: &Value, read: &Value, key: &str) -> Option<String> {
    match (given, read) {
        (Value::Array(_), Value::Object(_)) => Some(key.to_owned()),
        (Value::Object(given), Value::Object(read)) => given.iter().find_map(|(name, value)| {
            let next = read.get(name)?;
            list_for_section(value, next, &format!("{key}.{name}"))
        }),
        (Value::Array(given), Value::Array(read)) => given
            .iter()
            .zip(read)
            .enumerate()
            .find_map(|(i, (value, next))| list_for_section(value, next, &format!("{key}[{i}]"))),
        _ => None,
    }
}
