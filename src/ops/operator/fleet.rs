//! Fleet-wide settings (`admin.scope: fleet`): every change is written as the fleet's next
//! settings document in Redis, by compare-and-set on its version, and announced on a channel;
//! every instance reads the document when it is announced, every [`FLEET_POLL`] (a missed
//! announcement), and when Redis comes back, and applies it after the same validation as a
//! local change.
//!
//! Precedence while Redis is unreachable: changes apply to this instance only and are marked
//! local. When Redis answers again, they become the fleet's next version if the fleet's
//! settings did not move meanwhile; if they did, the fleet's settings replace them (logged).

use super::{to_json, Draft, Durability, FleetStatus, Operator, OpsMsg, Prepared, Revert};
use crate::config::{AdminScope, Config, Mode};
use crate::engine::Engine;
use crate::limiter::LimiterName;
use crate::ops::{limiters_from_json, Applied, ChangeError};
use crate::store::redis::{Cas, RedisStore};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How often an instance reads the fleet's settings even without an announcement.
pub(crate) const FLEET_POLL: Duration = Duration::from_secs(2);

/// The audit source of a change read from the fleet's settings.
pub(super) const SOURCE: &str = "fleet";

/// The audit action of local changes published to the fleet once Redis is back.
const SYNC: &str = "sync";

/// The fleet's settings document, as stored in Redis.
#[derive(Debug, Serialize, Deserialize)]
struct FleetDoc {
    kill_switch: bool,
    /// Every limiter's settings, in full (not a patch: instances' config files may differ).
    limiters: Value,
    reverts: Vec<FleetRevert>,
    /// The change that made this version, for every instance's audit log.
    action: String,
    instance: String,
    source: String,
    before: Value,
    after: Value,
}

/// A timed mode change's revert, due for the whole fleet at one wall-clock time.
#[derive(Debug, Serialize, Deserialize)]
struct FleetRevert {
    limiter: String,
    /// The mode to go back to.
    to: Mode,
    /// The mode the timed change set (the revert happens only if it is still in force).
    set: Mode,
    at_unix_ms: u64,
}

/// The operator's side of the fleet's settings.
pub(super) struct Link {
    store: Arc<RedisStore>,
    /// The version stored in Redis when last read or written: what the next write expects
    /// (lower than the version this instance runs if Redis lost the document).
    seen: u64,
}

impl Link {
    /// With `admin.scope: fleet` and a Redis store: the link, and a watcher that tells the
    /// operator (through `inbox`) when to read the fleet's settings.
    pub(super) fn new(
        engine: &Engine,
        config: &Config,
        inbox: &mpsc::Sender<OpsMsg>,
        shutdown: &watch::Receiver<bool>,
    ) -> Option<Self> {
        let store = engine.keyed().shared()?.clone();
        if config.admin_scope() != AdminScope::Fleet {
            return None;
        }
        tokio::spawn(watch(store.clone(), inbox.clone(), shutdown.clone()));
        Some(Self { store, seen: 0 })
    }
}

/// Subscribes to the settings channel and nudges the operator on every announcement, every
/// [`FLEET_POLL`], and on every (re)subscription; tells it when the subscription fails or its
/// connection is lost.
async fn watch(
    store: Arc<RedisStore>,
    inbox: mpsc::Sender<OpsMsg>,
    mut shutdown: watch::Receiver<bool>,
) {
    let nudge = || {
        // A full mailbox already holds work for the operator; a later poll catches up.
        let _ = inbox.try_send(OpsMsg::FleetChanged);
    };
    let unreachable = || {
        // A full mailbox: the next failed subscription tells it again.
        let _ = inbox.try_send(OpsMsg::FleetUnreachable);
    };
    let mut attempt = 0;
    let mut wait = Duration::from_millis(100);
    loop {
        if store.connected() {
            if let Ok(pubsub) = store.settings_subscribe(attempt).await {
                wait = Duration::from_millis(100);
                nudge();
                let mut messages = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        msg = messages.next() => match msg {
                            Some(_) => nudge(),
                            None => break, // the connection is gone: subscribe again
                        },
                        () = tokio::time::sleep(FLEET_POLL) => nudge(),
                        _ = shutdown.changed() => return,
                    }
                }
            }
            unreachable();
            attempt += 1;
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
        wait = (wait * 2).min(Duration::from_secs(1));
    }
}

impl Operator {
    /// Notes the version stored in Redis.
    fn saw(&mut self, version: u64) {
        if let Some(link) = &mut self.fleet {
            link.seen = version;
        }
    }

    /// The settings channel is unreachable: the link is down until a read succeeds.
    pub(super) fn unreachable(&self) {
        if self.fleet.is_some() {
            self.set_status(|s| s.connected = false);
        }
    }

    /// Publishes the status (state and gauge) after `update`.
    fn set_status(&self, update: impl FnOnce(&mut FleetStatus)) {
        let mut status = self.lock_status();
        update(&mut status);
        self.engine
            .metrics()
            .publish_fleet_in_sync(status.in_sync());
    }

    /// Makes a prepared change: locally, or as the fleet's next version. `Ok(None)`: another
    /// instance wrote a newer version first (read it, then prepare the change again).
    pub(super) async fn make(
        &mut self,
        p: Prepared,
        source: &str,
        durability: Durability,
    ) -> Result<Option<Applied>, ChangeError> {
        let Some((store, seen)) = self.fleet.as_ref().map(|l| (l.store.clone(), l.seen)) else {
            return self.make_local(p, source, durability).map(Some);
        };
        let current = self.engine.settings().load_full();
        let instance = self.instance();
        let running = self.lock_status().fleet_version;
        let version = running.max(current.version).max(seen) + 1;
        let settings = self.settle(p.draft, version)?;
        let doc = FleetDoc {
            kill_switch: settings.kill_switch,
            limiters: to_json(&settings.limiters),
            reverts: fleet_reverts(&p.reverts),
            action: p.action.to_owned(),
            instance: instance.clone(),
            source: source.to_owned(),
            before: p.before.clone(),
            after: p.after.clone(),
        };
        let text = serde_json::to_string(&doc).unwrap_or_default();
        let change = (p.before, p.after, source, instance.as_str());
        match store.settings_write(seen, version, &text).await {
            Ok(Cas::Written) => {
                self.saw(version);
                // The fleet's document is the durable record; the local file is a copy.
                let applied = self.install(
                    p.action,
                    settings,
                    (p.reverts, p.base),
                    change,
                    Durability::BestEffort,
                )?;
                self.set_status(|s| {
                    s.fleet_version = version;
                    s.connected = true;
                    s.local_changes = false;
                });
                Ok(Some(Applied {
                    fleet: true,
                    ..applied
                }))
            }
            Ok(Cas::Moved(_)) => Ok(None),
            Err(e) => {
                tracing::warn!("fleet settings: Redis did not take the change ({e}); it applies to this instance only until Redis is back");
                let applied =
                    self.install(p.action, settings, (p.reverts, p.base), change, durability)?;
                self.set_status(|s| {
                    s.connected = false;
                    s.local_changes = true;
                });
                Ok(Some(applied))
            }
        }
    }

    /// Reads the fleet's settings and catches up: applies a newer version, or publishes
    /// changes made here while Redis was unreachable.
    pub(super) async fn sync(&mut self) {
        let Some(store) = self.fleet.as_ref().map(|l| l.store.clone()) else {
            return;
        };
        // A second round when another instance published first.
        for _ in 0..2 {
            let stored = match store.settings_read().await {
                Ok(stored) => stored,
                Err(e) => {
                    tracing::debug!("fleet settings: cannot read them ({e})");
                    return self.set_status(|s| s.connected = false);
                }
            };
            self.set_status(|s| s.connected = true);
            let status = self.lock_status().clone();
            match stored {
                Some((v, text)) if v > status.fleet_version => {
                    if status.refused.as_ref().is_some_and(|(r, _)| *r == v) {
                        return; // refused already; counted and logged once
                    }
                    if status.local_changes {
                        tracing::warn!(version = v, "fleet settings: the fleet moved on while Redis was unreachable; its settings replace this instance's local changes");
                    }
                    return self.adopt(v, &text);
                }
                // The version this instance runs, or an older one (Redis lost the document;
                // instances keep their settings, and the next change is written over it).
                stored => {
                    let version = stored.map_or(0, |(v, _)| v);
                    self.saw(version);
                    // Changes made here while Redis was unreachable become the fleet's.
                    if !status.local_changes || self.publish_local(&store, version).await {
                        return;
                    }
                }
            }
        }
    }

    /// Applies the fleet's version `version`, or refuses it (reported; settings kept).
    fn adopt(&mut self, version: u64, text: &str) {
        let current = self.engine.settings().load_full();
        let parsed = serde_json::from_str::<FleetDoc>(text)
            .map_err(|e| format!("not a settings document: {e}"))
            .and_then(|doc| {
                let mut draft = Draft::of(&current);
                draft.limiters =
                    limiters_from_json(doc.limiters.clone()).map_err(|e| e.to_string())?;
                // This instance's settings that size memory or pick sources at start (its config
                // file may differ from the instance that wrote the document).
                draft.limiters.keep_sized_at_start(&current.limiters);
                draft.kill_switch = doc.kill_switch;
                let settings = self.settle(draft, version).map_err(|e| e.to_string())?;
                Ok((doc, settings))
            });
        let (doc, settings) = match parsed {
            Ok(ok) => ok,
            Err(error) => {
                tracing::error!(version, "fleet settings: this instance cannot apply the fleet's version {version} and keeps its settings: {error}");
                self.engine.metrics().fleet_settings("rejected");
                return self.set_status(|s| s.refused = Some((version, error)));
            }
        };
        let reverts = self.reverts_of(&doc.reverts);
        let change = (doc.before, doc.after, SOURCE, doc.instance.as_str());
        let installed = self.install(
            action(&doc.action),
            settings,
            (reverts, None),
            change,
            Durability::BestEffort,
        );
        if installed.is_ok() {
            self.engine.metrics().fleet_settings("applied");
            self.set_status(|s| {
                s.fleet_version = version;
                s.local_changes = false;
                s.refused = None;
            });
        }
    }

    /// Writes this instance's settings as the fleet's next version over `stored`; `false`
    /// when another instance wrote first (read theirs).
    async fn publish_local(&mut self, store: &RedisStore, stored: u64) -> bool {
        let current = self.engine.settings().load_full();
        let version = current
            .version
            .max(self.lock_status().fleet_version)
            .max(stored)
            + 1;
        let instance = self.instance();
        let summary = serde_json::json!({"kill_switch": current.kill_switch, "limiters": to_json(&current.limiters)});
        let doc = FleetDoc {
            kill_switch: current.kill_switch,
            limiters: to_json(&current.limiters),
            reverts: fleet_reverts(&self.reverts),
            action: SYNC.into(),
            instance: instance.clone(),
            source: "resync".into(),
            before: Value::Null,
            after: summary.clone(),
        };
        let text = serde_json::to_string(&doc).unwrap_or_default();
        match store.settings_write(stored, version, &text).await {
            Ok(Cas::Written) => {
                tracing::info!(
                    version,
                    "fleet settings: changes made while Redis was unreachable are now the fleet's"
                );
                if let Ok(settings) = self.settle(Draft::of(&current), version) {
                    let reverts = self.reverts.clone();
                    let change = (Value::Null, summary, "resync", instance.as_str());
                    let _ = self.install(
                        SYNC,
                        settings,
                        (reverts, None),
                        change,
                        Durability::BestEffort,
                    );
                }
                self.set_status(|s| {
                    s.fleet_version = version;
                    s.local_changes = false;
                });
                true
            }
            Ok(Cas::Moved(_)) => false,
            Err(e) => {
                tracing::debug!("fleet settings: cannot publish local changes yet ({e})");
                true
            }
        }
    }

    /// The operator's reverts for the fleet's `reverts` (timers on the brownout clock).
    fn reverts_of(&self, reverts: &[FleetRevert]) -> Vec<Revert> {
        let now = self.engine.clock().now();
        let now_wall = self.engine.clock().unix_origin() + now;
        reverts
            .iter()
            .filter_map(|r| {
                let wall = Duration::from_millis(r.at_unix_ms);
                Some(Revert {
                    deadline: now + wall.saturating_sub(now_wall),
                    wall,
                    limiter: LimiterName::parse(&r.limiter)?,
                    to: r.to,
                    set: r.set,
                })
            })
            .collect()
    }
}

fn fleet_reverts(reverts: &[Revert]) -> Vec<FleetRevert> {
    reverts
        .iter()
        .map(|r| FleetRevert {
            limiter: r.limiter.as_str().to_owned(),
            to: r.to,
            set: r.set,
            at_unix_ms: r.wall.as_millis() as u64,
        })
        .collect()
}

/// The audit action of a change another instance made.
fn action(name: &str) -> &'static str {
    crate::metrics::ACTIONS
        .into_iter()
        .chain([SYNC])
        .find(|a| *a == name)
        .unwrap_or(SOURCE)
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
