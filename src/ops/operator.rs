//! The operator actor: applies changes one at a time and owns the revert timers.

use super::audit::{rfc3339, AuditEntry};
use super::patch::{diff, merge};
use super::persist::{self, Overrides, PendingRevert};
use super::{limiters_from_json, Applied, Change, ChangeError};
use crate::config::{ConfigError, LimitersConfig, Mode};
use crate::limiter::LimiterName;
use crate::runtime::{Settings, Shared};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Messages to the operator.
pub(crate) enum OpsMsg {
    /// Apply a change and say how it went.
    Apply {
        change: Change,
        source: String,
        reply: oneshot::Sender<Result<Applied, ChangeError>>,
    },
}

/// A time-limited mode change waiting to be undone.
struct Revert {
    deadline: Instant,
    wall: SystemTime,
    limiter: LimiterName,
    /// The mode to go back to.
    to: Mode,
    /// The mode the timed change set; the revert only happens if it is still in force.
    set: Mode,
}

struct Operator {
    shared: Arc<Shared>,
    /// config.yaml's limiter settings; admin changes are kept as a patch over them.
    base: LimitersConfig,
    reverts: Vec<Revert>,
}

/// Starts the operator; pending reverts from the overrides file are re-armed.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    pending: Vec<PendingRevert>,
    shutdown: watch::Receiver<bool>,
) -> (mpsc::Sender<OpsMsg>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(16);
    let now_wall = SystemTime::now();
    let reverts = pending
        .into_iter()
        .filter_map(|p| {
            let limiter = LimiterName::parse(&p.limiter)?;
            let wall = UNIX_EPOCH + Duration::from_millis(p.at_unix_ms);
            let left = wall.duration_since(now_wall).unwrap_or(Duration::ZERO);
            let set = mode_of(&shared.settings.load().limiters, limiter);
            Some(Revert {
                deadline: Instant::now() + left,
                wall,
                limiter,
                to: p.mode,
                set,
            })
        })
        .collect();
    let operator = Operator {
        base: shared.config.limiters.clone(),
        shared,
        reverts,
    };
    (tx, tokio::spawn(operator.run(rx, shutdown)))
}

fn mode_of(l: &LimitersConfig, limiter: LimiterName) -> Mode {
    match limiter {
        LimiterName::RequestRate => l.request_rate.mode,
        LimiterName::ConcurrentRequests => l.concurrent_requests.mode,
        LimiterName::FleetUsage => l.fleet_usage.mode,
        LimiterName::WorkerUtilization => l.worker_utilization.mode,
    }
}

fn set_mode(l: &mut LimitersConfig, limiter: LimiterName, mode: Mode) {
    match limiter {
        LimiterName::RequestRate => l.request_rate.mode = mode,
        LimiterName::ConcurrentRequests => l.concurrent_requests.mode = mode,
        LimiterName::FleetUsage => l.fleet_usage.mode = mode,
        LimiterName::WorkerUtilization => l.worker_utilization.mode = mode,
    }
}

fn to_json(l: &LimitersConfig) -> Value {
    serde_json::to_value(l).unwrap_or(Value::Null)
}

/// Settings that size memory or build sources at start cannot change while running.
fn check_restart_only(old: &LimitersConfig, new: &LimitersConfig) -> Result<(), ConfigError> {
    let fixed = [
        (
            "limiters.request_rate.max_keys",
            old.request_rate.max_keys == new.request_rate.max_keys,
        ),
        (
            "limiters.request_rate.quotas",
            old.request_rate.quotas.len() == new.request_rate.quotas.len(),
        ),
        (
            "limiters.concurrent_requests.max_keys",
            old.concurrent_requests.max_keys == new.concurrent_requests.max_keys,
        ),
        (
            "limiters.worker_utilization.source",
            old.worker_utilization.source == new.worker_utilization.source
                && old.worker_utilization.sources == new.worker_utilization.sources,
        ),
    ];
    match fixed.iter().find(|(_, same)| !same) {
        Some((key, _)) => Err(ConfigError::invalid(
            *key,
            "cannot change while running (it sizes memory or picks sources at start; edit config.yaml and restart). The number of quotas is fixed; their settings can change",
        )),
        None => Ok(()),
    }
}

impl Operator {
    async fn run(mut self, mut inbox: mpsc::Receiver<OpsMsg>, mut shutdown: watch::Receiver<bool>) {
        loop {
            let next = self.reverts.iter().map(|r| r.deadline).min();
            let due = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                msg = inbox.recv() => match msg {
                    Some(OpsMsg::Apply { change, source, reply }) => {
                        let _ = reply.send(self.apply(change, &source));
                    }
                    None => break,
                },
                _ = due => self.revert_due(),
                _ = shutdown.changed() => break,
            }
        }
    }

    fn revert_due(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) =
            self.reverts.drain(..).partition(|r| r.deadline <= now);
        self.reverts = later;
        if due.is_empty() {
            return;
        }
        for r in due {
            let live = self.shared.settings.load_full();
            if mode_of(&live.limiters, r.limiter) != r.set {
                continue; // someone changed it since; their change stands
            }
            let mut limiters = live.limiters.clone();
            set_mode(&mut limiters, r.limiter, r.to);
            let before = json!({"limiter": r.limiter.as_str(), "mode": r.set});
            let after = json!({"limiter": r.limiter.as_str(), "mode": r.to});
            let kill = live.kill_switch;
            if let Err(e) = self.commit("revert", limiters, kill, before, after, "timer") {
                tracing::error!(limiter = r.limiter.as_str(), "could not revert: {e}");
            }
        }
        // Skipped reverts must leave the overrides file too, or a restart would re-arm them.
        self.persist();
    }

    fn apply(&mut self, change: Change, source: &str) -> Result<Applied, ChangeError> {
        let current = self.shared.settings.load_full();
        let mut limiters = current.limiters.clone();
        let mut kill = current.kill_switch;
        let action = change.action();
        let (before, after) = match change {
            Change::Mode { limiter, mode, ttl } => {
                let was = mode_of(&limiters, limiter);
                set_mode(&mut limiters, limiter, mode);
                // A newer change on the same limiter replaces pending reverts; a timed one
                // still goes back to the mode from before the first timed change.
                let first = self
                    .reverts
                    .iter()
                    .find(|r| r.limiter == limiter)
                    .map(|r| r.to);
                self.reverts.retain(|r| r.limiter != limiter);
                if let Some(ttl) = ttl {
                    self.reverts.push(Revert {
                        deadline: Instant::now() + ttl,
                        wall: SystemTime::now() + ttl,
                        limiter,
                        to: first.unwrap_or(was),
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
                let was = kill;
                kill = engaged;
                (json!({"engaged": was}), json!({"engaged": engaged}))
            }
            Change::Patch { patch, if_match } => {
                if let Some(expected) = if_match.filter(|&v| v != current.version) {
                    return Err(ChangeError::Stale {
                        expected,
                        current: current.version,
                    });
                }
                let mut doc = to_json(&limiters);
                merge(&mut doc, &patch);
                limiters = limiters_from_json(doc)?;
                (to_json(&current.limiters), to_json(&limiters))
            }
            Change::Reload(base) => {
                let mut doc = to_json(&base);
                if let Some(overrides) = diff(&to_json(&self.base), &to_json(&limiters)) {
                    merge(&mut doc, &overrides);
                }
                limiters = limiters_from_json(doc)?;
                let summary = (to_json(&current.limiters), to_json(&limiters));
                // The new base is in force only if the reload commits.
                let old = std::mem::replace(&mut self.base, *base);
                let result = self.commit(action, limiters, kill, summary.0, summary.1, source);
                if result.is_err() {
                    self.base = old;
                }
                return result;
            }
        };
        self.commit(action, limiters, kill, before, after, source)
    }

    /// Validates and swaps in new settings, then counts, logs, audits and persists the change.
    fn commit(
        &mut self,
        action: &'static str,
        limiters: LimitersConfig,
        kill_switch: bool,
        before: Value,
        after: Value,
        source: &str,
    ) -> Result<Applied, ChangeError> {
        let current = self.shared.settings.load_full();
        check_restart_only(&current.limiters, &limiters)?;
        limiters.validate()?;
        let version = current.version + 1;
        let settings = Settings::new(version, kill_switch, limiters, current.classifier.clone())?;
        self.shared.settings.store(Arc::new(settings));
        let shared = &self.shared;
        let live = shared.settings.load();
        shared
            .metrics
            .publish_settings(live.modes(), live.kill_switch, live.version);
        shared.metrics.admin_change(action);
        tracing::info!(action, version, source, after = %after, "admin change applied");
        shared
            .audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(AuditEntry {
                time: rfc3339(SystemTime::now()),
                action,
                before,
                after,
                version,
                source: source.to_owned(),
            });
        self.persist();
        Ok(Applied { version })
    }

    fn persist(&self) {
        let Some(path) = &self.shared.config.admin.overrides_file else {
            return;
        };
        let live = self.shared.settings.load();
        let overrides = Overrides {
            patch: diff(&to_json(&self.base), &to_json(&live.limiters)),
            kill_switch: live.kill_switch,
            reverts: self
                .reverts
                .iter()
                .map(|r| PendingRevert {
                    limiter: r.limiter.as_str().to_owned(),
                    mode: r.to,
                    at_unix_ms: r
                        .wall
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64),
                })
                .collect(),
        };
        if let Err(e) = persist::save(path, &overrides) {
            tracing::error!(path = %path.display(), "could not write the overrides file: {e}");
        }
    }
}
