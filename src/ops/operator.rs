//! The operator actor: applies changes one at a time, makes each durable before it takes
//! effect, and owns the revert timers.

use super::audit::{rfc3339, AuditEntry, AuditLog};
use super::patch::{diff, merge, split_document};
use super::persist::{self, Overrides, PendingRevert};
use super::reload::check_reloadable;
use super::{limiters_from_json, Applied, Change, ChangeError};
use crate::classify::Classifier;
use crate::config::Config;
use crate::config::{ConfigError, LimitersConfig, Mode};
use crate::engine::{Engine, Settings};
use crate::limiter::LimiterName;
use serde_json::{json, Value};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// Messages to the operator.
pub(crate) enum OpsMsg {
    /// Apply a change and say how it went.
    Apply {
        change: Change,
        source: String,
        reply: oneshot::Sender<Result<Applied, ChangeError>>,
    },
    /// Revert what is due on the brownout clock now, and say when done.
    RevertDue(oneshot::Sender<()>),
}

/// A time-limited mode change waiting to be undone.
#[derive(Clone)]
struct Revert {
    /// When, on the brownout clock.
    deadline: Duration,
    /// When, as time since the Unix epoch (what the overrides file keeps).
    wall: Duration,
    limiter: LimiterName,
    /// The mode to go back to.
    to: Mode,
    /// The mode the timed change set; the revert only happens if it is still in force.
    set: Mode,
}

/// What the operator is started with.
pub(crate) struct OperatorSetup {
    /// The engine whose settings it changes.
    pub(crate) engine: Arc<Engine>,
    /// The configuration the process started with: the base of admin changes, the overrides
    /// file, and the sections a reload may not change.
    pub(crate) config: Arc<Config>,
    /// Where accepted changes are recorded.
    pub(crate) audit: Arc<Mutex<AuditLog>>,
    /// Reverts from the overrides file, re-armed at start.
    pub(crate) pending: Vec<PendingRevert>,
}

struct Operator {
    shared: Arc<Engine>,
    config: Arc<Config>,
    audit: Arc<Mutex<AuditLog>>,
    /// config.yaml's limiter settings; admin changes are kept as a patch over them.
    base: LimitersConfig,
    reverts: Vec<Revert>,
}

/// Settings the operator is about to commit.
struct Draft {
    limiters: LimitersConfig,
    kill_switch: bool,
    classifier: Classifier,
    metrics_auth: bool,
}

impl Draft {
    fn of(live: &Settings) -> Self {
        Self {
            limiters: live.limiters.clone(),
            kill_switch: live.kill_switch,
            classifier: live.classifier.clone(),
            metrics_auth: live.metrics_auth,
        }
    }
}

/// Whether a commit that cannot be written to the overrides file still takes effect.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// An operator's change: refused unless it is on disk first.
    Required,
    /// A timer's revert: nobody is waiting for an answer, and a restart would revert too.
    BestEffort,
}

/// Starts the operator; pending reverts from the overrides file are re-armed.
pub(crate) fn spawn(
    setup: OperatorSetup,
    shutdown: watch::Receiver<bool>,
) -> (mpsc::Sender<OpsMsg>, JoinHandle<()>) {
    let OperatorSetup {
        engine: shared,
        config,
        audit,
        pending,
    } = setup;
    let (tx, rx) = mpsc::channel(16);
    let now = shared.clock.now();
    let now_wall = shared.clock.unix_origin() + now;
    let reverts = pending
        .into_iter()
        .filter_map(|p| {
            let limiter = LimiterName::parse(&p.limiter)?;
            let wall = Duration::from_millis(p.at_unix_ms);
            let left = wall.saturating_sub(now_wall);
            let set = mode_of(&shared.settings.load().limiters, limiter);
            Some(Revert {
                deadline: now + left,
                wall,
                limiter,
                to: p.mode,
                set,
            })
        })
        .collect();
    let operator = Operator {
        base: config.limiters.clone(),
        shared,
        config,
        audit,
        reverts,
    };
    (tx, tokio::spawn(operator.run(rx, shutdown)))
}

fn mode_of(l: &LimitersConfig, limiter: LimiterName) -> Mode {
    match limiter {
        LimiterName::RequestRate => l.request_rate.mode,
        LimiterName::ConcurrentRequests => l.concurrent_requests.mode,
        LimiterName::FleetUsage => l.fleet_usage.mode,
        LimiterName::AdaptiveConcurrency => l.adaptive_concurrency.mode,
        LimiterName::WorkerUtilization => l.worker_utilization.mode,
    }
}

fn set_mode(l: &mut LimitersConfig, limiter: LimiterName, mode: Mode) {
    match limiter {
        LimiterName::RequestRate => l.request_rate.mode = mode,
        LimiterName::ConcurrentRequests => l.concurrent_requests.mode = mode,
        LimiterName::FleetUsage => l.fleet_usage.mode = mode,
        LimiterName::AdaptiveConcurrency => l.adaptive_concurrency.mode = mode,
        LimiterName::WorkerUtilization => l.worker_utilization.mode = mode,
    }
}

fn to_json(l: &LimitersConfig) -> Value {
    serde_json::to_value(l).unwrap_or(Value::Null)
}

/// What a reload changes besides the limiters, for the audit log.
fn reload_summary(d: &Draft) -> Value {
    json!({
        "limiters": to_json(&d.limiters),
        "classifier": d.classifier.config(),
        "metrics_auth": d.metrics_auth,
    })
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
            // Deadlines are on the brownout clock; the wait for the next one is in real time
            // (the same thing with the system clock; tests with a manual clock ask instead).
            let next = self.reverts.iter().map(|r| r.deadline).min();
            let now = self.shared.clock.now();
            let due = async {
                match next {
                    Some(at) => tokio::time::sleep(at.saturating_sub(now)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                msg = inbox.recv() => match msg {
                    Some(OpsMsg::Apply { change, source, reply }) => {
                        let _ = reply.send(self.apply(change, &source));
                    }
                    Some(OpsMsg::RevertDue(reply)) => {
                        self.revert_due();
                        let _ = reply.send(());
                    }
                    None => break,
                },
                _ = due => self.revert_due(),
                _ = shutdown.changed() => break,
            }
        }
    }

    fn revert_due(&mut self) {
        let now = self.shared.clock.now();
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
            let mut draft = Draft::of(&live);
            set_mode(&mut draft.limiters, r.limiter, r.to);
            let before = json!({"limiter": r.limiter.as_str(), "mode": r.set});
            let after = json!({"limiter": r.limiter.as_str(), "mode": r.to});
            let change = (before, after, "timer");
            let committed = self.commit("revert", draft, None, change, Durability::BestEffort);
            if let Err(e) = committed {
                tracing::error!(limiter = r.limiter.as_str(), "could not revert: {e}");
            }
        }
        // Skipped reverts must leave the overrides file too, or a restart would re-arm them.
        let live = self.shared.settings.load_full();
        if let Err(e) = self.persist(&self.base, &live, &self.reverts) {
            tracing::error!("{e}");
        }
    }

    fn apply(&mut self, change: Change, source: &str) -> Result<Applied, ChangeError> {
        let current = self.shared.settings.load_full();
        let mut draft = Draft::of(&current);
        let mut reverts = self.reverts.clone();
        let mut base = None;
        let action = change.action();
        let (before, after) = match change {
            Change::Mode { limiter, mode, ttl } => {
                let was = mode_of(&draft.limiters, limiter);
                set_mode(&mut draft.limiters, limiter, mode);
                // A newer change on the same limiter replaces pending reverts; a timed one
                // still goes back to the mode from before the first timed change.
                let first = reverts.iter().find(|r| r.limiter == limiter).map(|r| r.to);
                reverts.retain(|r| r.limiter != limiter);
                if let Some(ttl) = ttl {
                    let now = self.shared.clock.now();
                    reverts.push(Revert {
                        deadline: now + ttl,
                        wall: self.shared.clock.unix_origin() + now + ttl,
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
                draft.classifier = Classifier::new(&config.classifier, self.shared.key_seed)
                    .map_err(|m| ConfigError::invalid("classifier.critical", m))?;
                draft.metrics_auth = config.admin.metrics_auth;
                base = Some(config.limiters);
                (before, reload_summary(&draft))
            }
        };
        let change = (before, after, source);
        let applied = self.commit(
            action,
            draft,
            Some((&reverts, base.as_ref())),
            change,
            Durability::Required,
        )?;
        self.reverts = reverts;
        if let Some(base) = base {
            self.base = base;
        }
        Ok(applied)
    }

    /// Validates `draft`, writes it to the overrides file, and only then swaps it in; counts,
    /// logs and audits it. `next` is the reverts and base that go with it (default: the
    /// operator's own). Nothing changes when it fails.
    fn commit(
        &self,
        action: &'static str,
        draft: Draft,
        next: Option<(&[Revert], Option<&LimitersConfig>)>,
        (before, after, source): (Value, Value, &str),
        durability: Durability,
    ) -> Result<Applied, ChangeError> {
        let current = self.shared.settings.load_full();
        check_restart_only(&current.limiters, &draft.limiters)?;
        draft.limiters.validate()?;
        let version = current.version + 1;
        let settings = Settings::new(
            version,
            draft.kill_switch,
            draft.limiters,
            draft.classifier,
            draft.metrics_auth,
        )?;
        let (reverts, base) = next.unwrap_or((&self.reverts, None));
        // Durable first: a change that would not survive a restart is not made.
        if let Err(e) = self.persist(base.unwrap_or(&self.base), &settings, reverts) {
            match durability {
                Durability::Required => return Err(e),
                Durability::BestEffort => tracing::error!("{e}"),
            }
        }
        self.shared.settings.store(Arc::new(settings));
        let shared = &self.shared;
        let live = shared.settings.load();
        shared
            .metrics
            .publish_settings(live.modes(), live.kill_switch, live.version);
        shared.metrics.admin_change(action);
        // Actors whose timers follow the settings re-arm now.
        shared.settings_changed.send_replace(version);
        tracing::info!(action, version, source, after = %after, "admin change applied");
        self.audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(AuditEntry {
                time: rfc3339(UNIX_EPOCH + shared.clock.unix_origin() + shared.clock.now()),
                action,
                before,
                after,
                version,
                source: source.to_owned(),
            });
        Ok(Applied { version })
    }

    /// Writes `settings` (with its pending `reverts`) to the overrides file as a patch over
    /// `base`; nothing to do without one.
    fn persist(
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
        };
        persist::save(path, &overrides).map_err(|e| ChangeError::NotPersisted {
            path: path.clone(),
            reason: e.to_string(),
        })
    }
}
