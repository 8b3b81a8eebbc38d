//! Writing the settings to the overrides file, so that admin changes outlive a restart.

use super::{to_json, Operator, Revert};
use crate::config::LimitersConfig;
use crate::engine::Settings;
use crate::ops::patch::diff;
use crate::ops::persist::{self, Overrides, PendingRevert};
use crate::ops::ChangeError;

impl Operator {
    /// Writes `settings` (with its pending `reverts`) to the overrides file as a patch over
    /// `base`; nothing to do without one.
    pub(super) fn persist(
        &self,
        base: &LimitersConfig,
        settings: &Settings,
        reverts: &[Revert],
    ) -> Result<(), ChangeError> {
        let Some(path) = &self.config.admin.overrides_file else {
            return Ok(());
        };
        let overrides = Overrides {
            patch: diff(&to_json(base), &to_json(&settings.limiters)),
            kill_switch: settings.kill_switch,
            reverts: reverts
                .iter()
                .map(|r| PendingRevert {
                    limiter: r.limiter.as_str().to_owned(),
                    mode: r.to,
                    at_unix_ms: r.wall.as_millis() as u64,
                })
                .collect(),
            version: settings.version,
        };
        persist::save(path, &overrides).map_err(|e| ChangeError::NotPersisted {
            path: path.clone(),
            reason: e.to_string(),
        })
    }
}
