//! Operating the handle at run time: admin changes, reloads and the audit log, all through the
//! operator actor.

use super::Brownout;
use crate::ops::{Applied, AuditEntry, Change, ChangeError};
use serde_json::Value;

impl Brownout {
    /// Applies `change`, asked for by `source` (an address, `timer`, `signal`...).
    ///
    /// # Errors
    /// [`ChangeError`] says why nothing changed: invalid settings (naming the key), a stale
    /// `If-Match`, a change that could not be persisted, or actors not started.
    ///
    /// # Cancel safety
    /// The operator applies a change it has received whether or not the caller still waits:
    /// dropping the future after it was sent leaves the change made (and audited).
    pub async fn change(
        &self,
        change: Change,
        source: impl Into<String>,
    ) -> Result<Applied, ChangeError> {
        let operator = self.operator().ok_or(ChangeError::NotRunning)?;
        crate::ops::send(&operator, change, source.into()).await
    }

    /// Reads the configuration file again and applies it (what SIGHUP does when
    /// `admin.reload_on_sighup` is on): limiters, classifier and `admin.metrics_auth` change
    /// at once; a file that does not validate, or that changes a section that is only read
    /// at start (binds, store, demo, `max_keys`, the number of quotas, the utilization
    /// source), changes nothing and names the key.
    ///
    /// # Errors
    /// As for [`change`](Self::change), plus [`ChangeError::NoFile`] when built without a file.
    ///
    /// # Cancel safety
    /// As for [`change`](Self::change).
    pub async fn reload_config(&self) -> Result<Applied, ChangeError> {
        let operator = self.operator().ok_or(ChangeError::NotRunning)?;
        let file = self.inner.config_file.as_ref();
        crate::ops::reload(file, &operator, "api").await
    }

    /// Reverts the time-limited mode changes whose ttl has run out on the brownout clock. The
    /// operator does this by itself when the time comes; a test driving a `ManualClock` calls
    /// it after advancing the clock, instead of waiting. Does nothing when not started.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes may leave the reverts to be made a moment later
    /// by the operator itself; nothing is lost.
    pub async fn revert_due_now(&self) {
        let Some(operator) = self.operator() else {
            return;
        };
        let (reply, done) = tokio::sync::oneshot::channel();
        if operator
            .send(crate::ops::OpsMsg::RevertDue(reply))
            .await
            .is_ok()
        {
            let _ = done.await;
        }
    }

    /// The last 256 changes, oldest first.
    pub fn audit(&self) -> Vec<AuditEntry> {
        self.inner
            .audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entries()
    }

    /// The live settings version and limiter settings as JSON.
    pub fn limiters_json(&self) -> (u64, bool, Value) {
        let settings = self.settings();
        let json = serde_json::to_value(&settings.limiters).unwrap_or(Value::Null);
        (settings.version, settings.kill_switch, json)
    }
}
