//! The operator actor: applies changes one at a time, makes each durable before it takes
//! effect, and owns the revert timers. With `admin.scope: fleet` a change is durable once it
//! is the fleet's settings document in Redis (see [`fleet`]).

#[cfg(feature = "redis")]
mod fleet;
#[cfg(not(feature = "redis"))]
mod local;
#[cfg(not(feature = "redis"))]
use local as fleet;
mod prepare;
mod save;
mod status;

pub(crate) use status::FleetStatus;

use super::audit::{rfc3339, AuditEntry, AuditLog};
use super::persist::PendingRevert;
use super::{Applied, Change, ChangeError};
use crate::classify::Classifier;
use crate::config::Config;
use crate::config::{ConfigError, LimitersConfig, Mode};
use crate::control::Controller;
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
    /// The fleet's settings may have changed (or Redis is back): read them. (Sent only by
    /// the fleet link of the `redis` feature.)
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    FleetChanged,
    /// The fleet's settings channel could not be subscribed to, or its connection was lost:
    /// the settings link is down until a read of the fleet's settings succeeds. (Sent only by
    /// the fleet link of the `redis` feature.)
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    FleetUnreachable,
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

impl Revert {
    /// Whether `other` is the same pending revert (the same timer, the same modes).
    fn same(&self, other: &Revert) -> bool {
        (self.deadline, self.limiter, self.to, self.set)
            == (other.deadline, other.limiter, other.to, other.set)
    }
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
    /// Where this instance's view of the fleet's settings is published (`/v1/state`).
    pub(crate) status: Arc<Mutex<FleetStatus>>,
}

struct Operator {
    engine: Arc<Engine>,
    config: Arc<Config>,
    audit: Arc<Mutex<AuditLog>>,
    /// config.yaml's limiter settings; admin changes are kept as a patch over them.
    base: LimitersConfig,
    reverts: Vec<Revert>,
    /// The fleet's settings document, with `admin.scope: fleet` (always `None` without the
    /// `redis` feature).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    fleet: Option<fleet::Link>,
    status: Arc<Mutex<FleetStatus>>,
}

/// A change worked out against the live settings, not made yet.
struct Prepared {
    action: &'static str,
    draft: Draft,
    /// The reverts pending once it is made.
    reverts: Vec<Revert>,
    /// config.yaml's new limiter settings (a reload).
    base: Option<LimitersConfig>,
    before: Value,
    after: Value,
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
        engine,
        config,
        audit,
        pending,
        status,
    } = setup;
    let (tx, rx) = mpsc::channel(16);
    let fleet = fleet::Link::new(&engine, &config, &tx, &shutdown);
    let now = engine.clock().now();
    let now_wall = engine.clock().unix_origin() + now;
    let reverts = pending
        .into_iter()
        .filter_map(|p| {
            let limiter = LimiterName::parse(&p.limiter)?;
            let wall = Duration::from_millis(p.at_unix_ms);
            let left = wall.saturating_sub(now_wall);
            let set = limiter.mode(&engine.settings().load().limiters);
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
        engine,
        config,
        audit,
        reverts,
        fleet,
        status,
    };
    (tx, tokio::spawn(operator.run(rx, shutdown)))
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
/// Each limiter names its own ([`crate::limiter::Limiter::restart_only`]).
fn check_restart_only(old: &LimitersConfig, new: &LimitersConfig) -> Result<(), ConfigError> {
    match old.restart_only_change(new) {
        Some(key) => Err(ConfigError::invalid(
            key,
            "cannot change while running (it sizes memory or picks sources at start; edit the configuration file and restart). The number of quotas, and which are sliding logs, is fixed; their other settings can change",
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
            let now = self.engine.clock().now();
            let due = async {
                match next {
                    Some(at) => tokio::time::sleep(at.saturating_sub(now)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                msg = inbox.recv() => match msg {
                    Some(OpsMsg::Apply { change, source, reply }) => {
                        let _ = reply.send(self.apply(change, &source).await);
                    }
                    Some(OpsMsg::RevertDue(reply)) => {
                        self.revert_due().await;
                        let _ = reply.send(());
                    }
                    Some(OpsMsg::FleetChanged) => self.sync().await,
                    Some(OpsMsg::FleetUnreachable) => self.unreachable(),
                    None => break,
                },
                _ = due => self.revert_due().await,
                _ = shutdown.changed() => break,
            }
        }
    }

    async fn revert_due(&mut self) {
        // In the fleet, every instance's timer fires: the first to write the revert makes it,
        // the others find it done when they read the fleet's settings (at most a few rounds).
        for _ in 0..3 {
            let now = self.engine.clock().now();
            if !self.reverts.iter().any(|r| r.deadline <= now) {
                return;
            }
            let (due, later): (Vec<_>, Vec<_>) = self
                .reverts
                .iter()
                .cloned()
                .partition(|r| r.deadline <= now);
            let live = self.engine.settings().load_full();
            let mut draft = Draft::of(&live);
            let (mut before, mut after) = (Vec::new(), Vec::new());
            for r in due {
                if r.limiter.mode(&draft.limiters) != r.set {
                    continue; // someone changed it since; their change stands
                }
                r.limiter.set_mode(&mut draft.limiters, r.to);
                before.push(json!({"limiter": r.limiter.as_str(), "mode": r.set}));
                after.push(json!({"limiter": r.limiter.as_str(), "mode": r.to}));
            }
            if before.is_empty() {
                // Every due revert was overtaken by a later change, which stands. Only the
                // timers go (from the overrides file too, or a restart would re-arm them); a
                // fleet's document keeps them until its next change, and every instance
                // skips them the same way.
                self.reverts = later;
                if let Err(e) = self.persist(&self.base, &live, &self.reverts) {
                    tracing::error!("{e}");
                }
                return;
            }
            let unwrap = |mut v: Vec<Value>| if v.len() == 1 { v.remove(0) } else { json!(v) };
            let prepared = Prepared {
                action: crate::metrics::Action::Revert.as_str(),
                draft,
                reverts: later,
                base: None,
                before: unwrap(before),
                after: unwrap(after),
            };
            match self.make(prepared, "timer", Durability::BestEffort).await {
                Ok(Some(_)) => return,
                Ok(None) => self.sync().await,
                Err(e) => {
                    tracing::error!("could not revert: {e}");
                    // Drop the due reverts: retrying every instant would not help.
                    self.reverts.retain(|r| r.deadline > now);
                    return;
                }
            }
        }
    }

    /// Makes `change`: worked out against the live settings and, in the fleet, written as
    /// the fleet's next version (if another instance wrote one first, this one reads it and
    /// works the change out again on top of it).
    async fn apply(&mut self, change: Change, source: &str) -> Result<Applied, ChangeError> {
        for _ in 0..3 {
            let prepared = self.prepare(change.clone())?;
            if let Some(current) = self.unchanged(&prepared) {
                // Nothing would change: no new version, no audit entry, nothing written.
                return Ok(current);
            }
            if let Some(applied) = self.make(prepared, source, Durability::Required).await? {
                return Ok(applied);
            }
            self.sync().await;
        }
        Err(ChangeError::Contended)
    }

    /// The settings as they stand when `p` would leave every setting, pending revert and
    /// the file's base as they are (a kill switch set to its state, the GET document sent
    /// back, a reload of an unchanged file); `None` when it changes something.
    fn unchanged(&self, p: &Prepared) -> Option<Applied> {
        let live = self.engine.settings().load_full();
        let same = p.draft.limiters == live.limiters
            && p.draft.kill_switch == live.kill_switch
            && p.draft.metrics_auth == live.metrics_auth
            && p.draft.classifier.config() == live.classifier.config()
            && p.base.as_ref().is_none_or(|base| *base == self.base)
            && p.reverts.len() == self.reverts.len()
            && p.reverts.iter().zip(&self.reverts).all(|(a, b)| a.same(b));
        same.then(|| Applied {
            version: live.version,
            fleet: self.fleet.is_some() && self.lock_status().in_sync(),
        })
    }

    /// Makes a prepared change on this instance only, as its next version.
    fn make_local(
        &mut self,
        p: Prepared,
        source: &str,
        durability: Durability,
    ) -> Result<Applied, ChangeError> {
        let current = self.engine.settings().load_full();
        let instance = self.instance();
        let settings = self.settle(p.draft, current.version + 1)?;
        let change = (p.before, p.after, source, instance.as_str());
        self.install(p.action, settings, (p.reverts, p.base), change, durability)
    }

    /// This instance's name in the audit log and the fleet's settings.
    fn instance(&self) -> String {
        self.lock_status().instance.clone()
    }

    fn lock_status(&self) -> std::sync::MutexGuard<'_, FleetStatus> {
        self.status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Validates `draft` as settings of `version`; nothing changes.
    fn settle(&self, draft: Draft, version: u64) -> Result<Settings, ChangeError> {
        let current = self.engine.settings().load_full();
        check_restart_only(&current.limiters, &draft.limiters)?;
        draft.limiters.validate()?;
        Ok(Settings::new(
            version,
            draft.kill_switch,
            draft.limiters,
            draft.classifier,
            draft.metrics_auth,
        )?)
    }

    /// Writes validated `settings` to the overrides file and only then swaps them in (with
    /// their `reverts` and `base`); counts, logs and audits the change. Nothing changes when
    /// a `Required` write fails.
    fn install(
        &mut self,
        action: &'static str,
        settings: Settings,
        (reverts, base): (Vec<Revert>, Option<LimitersConfig>),
        (before, after, source, instance): (Value, Value, &str, &str),
        durability: Durability,
    ) -> Result<Applied, ChangeError> {
        // Durable first: a change that would not survive a restart is not made.
        if let Err(e) = self.persist(base.as_ref().unwrap_or(&self.base), &settings, &reverts) {
            match durability {
                Durability::Required => return Err(e),
                Durability::BestEffort => tracing::error!("{e}"),
            }
        }
        let version = settings.version;
        let engine = &self.engine;
        // worker_utilization turned off: its shedding is over, and back on it starts from
        // rest (the amount at rest under its new settings).
        let wu = &settings.limiters.worker_utilization;
        let rest = (wu.mode == Mode::Off
            && engine.settings().load().limiters.worker_utilization.mode != Mode::Off)
            .then(|| Controller::new(wu.controller(), engine.clock().now()).rest());
        // In force, its gauges published, and the actors whose timers follow it re-armed.
        engine.settings().replace(settings, engine.metrics());
        if let Some(rest) = rest {
            engine.plan().rest(rest, engine.clock().now());
        }
        self.reverts = reverts;
        if let Some(base) = base {
            self.base = base;
        }
        if source != fleet::SOURCE {
            engine.metrics().admin_change(action);
        }
        tracing::info!(action, version, source, instance, after = %after, "admin change applied");
        self.audit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(AuditEntry {
                time: rfc3339(UNIX_EPOCH + engine.clock().unix_origin() + engine.clock().now()),
                action,
                before,
                after,
                version,
                source: source.to_owned(),
                instance: instance.to_owned(),
            });
        Ok(Applied {
            version,
            fleet: false,
        })
    }
}
