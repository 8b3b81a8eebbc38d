//! Working a change out against the live settings (nothing is changed yet).

use super::{reload_summary, to_json, Draft, Operator, Prepared, Revert};
use crate::classify::Classifier;
use crate::config::{ConfigError, LimitersConfig};
use crate::ops::patch::{diff, merge, split_document};
use crate::ops::reload::check_reloadable;
use crate::ops::{limiters_from_json, Change, ChangeError};
use serde_json::json;

impl Operator {
    /// The settings, reverts and base `change` would leave, and its audit summary.
    pub(super) fn prepare(&self, change: Change) -> Result<Prepared, ChangeError> {
        let current = self.engine.settings().load_full();
        let mut draft = Draft::of(&current);
        let mut reverts = self.reverts.clone();
        let mut base = None;
        let action = change.action();
        let (before, after) = match change {
            Change::Mode { limiter, mode, ttl } => {
                let was = limiter.mode(&draft.limiters);
                limiter.set_mode(&mut draft.limiters, mode);
                // A newer change on the same limiter replaces pending reverts; a timed one
                // still goes back to the mode from before the first timed change.
                let first = reverts.iter().find(|r| r.limiter == limiter).map(|r| r.to);
                reverts.retain(|r| r.limiter != limiter);
                // A revert to the mode being set would change nothing: none is armed.
                let to = first.unwrap_or(was);
                if let Some(ttl) = ttl.filter(|_| to != mode) {
                    let now = self.engine.clock().now();
                    reverts.push(Revert {
                        deadline: now + ttl,
                        wall: self.engine.clock().unix_origin() + now + ttl,
                        limiter,
                        to,
                        set: mode,
                    });
                }
                let ttl_seconds = ttl.map(|t| t.as_secs());
                (
                    json!({"limiter": limiter.as_str(), "mode": was}),
                    json!({"limiter": limiter.as_str(), "mode": mode, "ttl_seconds": ttl_seconds}),
                )
            }
            Change::KillSwitch(engaged) => {
                draft.kill_switch = engaged;
                (
                    json!({"engaged": current.kill_switch}),
                    json!({"engaged": engaged}),
                )
            }
            Change::Patch { patch, if_match } => {
                if let Some(expected) = if_match.filter(|&v| v != current.version) {
                    return Err(ChangeError::Stale {
                        expected,
                        current: current.version,
                    });
                }
                let doc = split_document(&patch, current.version)?;
                if let Some(limiters) = doc.limiters {
                    let mut merged = to_json(&draft.limiters);
                    merge(&mut merged, limiters);
                    draft.limiters = limiters_from_json(merged)?;
                }
                if let Some(engaged) = doc.kill_switch {
                    draft.kill_switch = engaged;
                }
                let document = |kill: bool, l: &LimitersConfig| json!({"kill_switch": kill, "limiters": to_json(l)});
                (
                    document(current.kill_switch, &current.limiters),
                    document(draft.kill_switch, &draft.limiters),
                )
            }
            Change::Reload(config) => {
                check_reloadable(&self.config, &config)?;
                let before = reload_summary(&draft);
                let mut doc = to_json(&config.limiters);
                if let Some(overrides) = diff(&to_json(&self.base), &to_json(&current.limiters)) {
                    merge(&mut doc, &overrides);
                }
                draft.limiters = limiters_from_json(doc)?;
                draft.classifier = Classifier::new(&config.classifier, self.engine.key_seed())
                    .map_err(|m| ConfigError::invalid("classifier.critical", m))?;
                draft.metrics_auth = config.admin.metrics_auth;
                base = Some(config.limiters);
                (before, reload_summary(&draft))
            }
        };
        Ok(Prepared {
            action,
            draft,
            reverts,
            base,
            before,
            after,
        })
    }
}
