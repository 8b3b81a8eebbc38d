//! What is given back after a decision — permits and fleet slots of finished requests, the
//! charges of requests a later limiter refused, failed responses counted against failure
//! quotas — queued without waiting and sent by one task in batches, off the request path.
//!
//! A batch that fails (Redis down, a timeout, an error) is not all lost: its releases are
//! idempotent and kept to be sent again ([`ReleaseRetries`]) until Redis answers, so that permits
//! persisted by a Redis that crashed are given back within a reconnect of its restart rather
//! than held until their TTL. Refunds and failure counts are not idempotent (a call that timed
//! out may have run): a failed one is dropped and counted.

use super::conn::Conn;
use super::pending::{self, FailedRelease, ReleaseRetries};
use super::script::{self, ClientReply, Keys, Shape, SlotSet};
use super::RedisStore;
use crate::math::window::WindowRule;
use crate::store::TableKind;
use crate::store::{wrote, Ask, Op, Table};
use redis::{Cmd, Script};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Most undo operations waiting to be sent; past it they are dropped (and counted): permits
/// then expire by their TTL, refunds are lost (the client was charged for a refused request).
pub(super) const QUEUE: usize = 65_536;
/// Most operations in one undo script call.
const BATCH: usize = 256;
/// Deadline of an undo batch (off the request path).
const DEADLINE: Duration = Duration::from_millis(250);
/// Most kept releases sent again in one batch.
const RETRY_BATCH: usize = 4 * BATCH;
/// With nothing to send for this long, a PING tells whether Redis still answers (for
/// `/v1/state`, and so that the connection comes back before it is needed).
const HEARTBEAT: Duration = Duration::from_secs(1);

impl RedisStore {
    /// Undo operations dropped: the queue was full, or a release that failed was kept a permit
    /// TTL or past the most kept.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues an undo operation (never waits; a full queue drops it, and it is counted).
    pub fn undo(&self, undo: Undo) {
        if self.undo_tx.try_send(undo).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Gives back what `op` (a bucket or a counted window) wrote for the request of `member`
    /// (a later limiter refused it).
    pub(crate) fn refund(&self, op: &Op, member: u64) {
        match *op {
            Op::Gcra {
                table,
                key,
                tag,
                charge,
            } => self.undo(Undo::Gcra {
                table,
                tag,
                key,
                increment: charge.increment,
            }),
            Op::Window {
                table, key, rule, ..
            } => self.undo(Undo::Window {
                table,
                key,
                window: rule.window,
                member,
            }),
            Op::Slot { .. } => {}
        }
    }

    /// Gives back, after its response, a slot of `key` in `table` that a request decided
    /// here took as `member`.
    pub(crate) fn release(&self, member: u64, table: Table, key: u64) {
        self.undo(Undo::Release {
            set: SlotSet { table, key },
            member,
        });
    }

    /// Counts the failed response of the request of `member` in `op`'s window (a failure
    /// quota).
    pub(crate) fn count_failure(&self, op: Op, member: u64) {
        if let Op::Window {
            table, key, rule, ..
        } = op
        {
            self.undo(Undo::Failure {
                table,
                key,
                rule,
                member,
            });
        }
    }

    /// Gives back the slots `ask` may have taken as `member`.
    pub(super) fn release_as(&self, ask: &Ask, member: u64) {
        for op in ask.ops() {
            if let Op::Slot { table, key, .. } = *op {
                self.release(member, table, key);
            }
        }
    }

    /// Gives back everything the decide script kept for `ask` (`reply`), as `member`.
    pub fn give_back(&self, ask: &Ask, reply: &ClientReply, member: u64) {
        let all = vec![true; ask.groups().len()];
        self.give_back_groups(ask, reply, member, &all);
    }

    /// Gives back what the decide script kept for `ask` (`reply`), as `member`, of the groups
    /// marked in `which`: the buckets that allowed the request, the windows that counted it
    /// and the slots taken.
    pub(super) fn give_back_groups(
        &self,
        ask: &Ask,
        reply: &ClientReply,
        member: u64,
        which: &[bool],
    ) {
        if !reply.written {
            return;
        }
        for ((group, passed), give) in ask.groups().iter().zip(&reply.groups).zip(which) {
            if !give || *passed != Some(true) {
                continue;
            }
            let range = usize::from(group.start)..usize::from(group.end);
            for (op, answer) in ask.ops()[range.clone()].iter().zip(&reply.replies[range]) {
                if !wrote(op, *answer) {
                    continue;
                }
                match *op {
                    Op::Slot { table, key, .. } => self.release(member, table, key),
                    Op::Gcra { .. } | Op::Window { .. } => self.refund(op, member),
                }
            }
        }
    }
}

/// One command to send, with the releases it carries (kept again if it fails).
struct Outgoing {
    cmd: redis::Cmd,
    releases: Vec<FailedRelease>,
}

/// Sends queued undo operations in batches of up to [`BATCH`], with kept releases due again,
/// until the store is gone; PINGs Redis when idle for [`HEARTBEAT`].
pub(super) async fn run(
    store: Weak<RedisStore>,
    mut rx: mpsc::Receiver<Undo>,
    on_error: Arc<dyn Fn(&'static str) + Send + Sync>,
) {
    let Some(ttl_us) = store.upgrade().map(|s| s.ttl_us) else {
        return;
    };
    let mut pending = ReleaseRetries::new(pending::CAP, ttl_us);
    let mut batch = Vec::with_capacity(BATCH);
    // The next try of the kept releases, or the next heartbeat when none is kept.
    let mut next = Instant::now() + HEARTBEAT;
    loop {
        tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => if n == 0 { return },
            () = tokio::time::sleep_until(next) => {}
        }
        let Some(store) = store.upgrade() else { return };
        let now = Instant::now();
        let retries = if !pending.is_empty() && now >= next {
            store.drop_releases(pending.expire(store.now_us()));
            pending.take(RETRY_BATCH)
        } else {
            Vec::new()
        };
        let ok = if batch.is_empty() && retries.is_empty() {
            heartbeat(&store).await
        } else {
            let since = store.now_us();
            let sends = commands(&store, batch.drain(..), retries, since);
            let failed = send(&store, sends, &*on_error).await;
            let ok = failed.is_empty();
            store.drop_releases(pending.restore(failed, since));
            ok
        };
        store.answered(ok);
        next = if ok {
            pending.succeeded();
            // Redis answers: what is kept goes at once.
            if pending.is_empty() {
                Instant::now() + HEARTBEAT
            } else {
                Instant::now()
            }
        } else {
            Instant::now() + pending.failed()
        };
    }
}

/// PINGs Redis; whether it answered (`false` before the first connection too).
async fn heartbeat(store: &RedisStore) -> bool {
    let Some(conn) = store.conn.load_full() else {
        return false;
    };
    let mut c = (*conn).clone();
    let ping = redis::cmd("PING");
    let answer = tokio::time::timeout(DEADLINE, ping.query_async::<()>(&mut c)).await;
    matches!(answer, Ok(Ok(())))
}

/// The commands for `batch` (its releases tried first at `since`) and the kept releases
/// `retries`: per client one HDEL with every member it gets back, one ZREM for the fleet's
/// set, and one undo script call per refund or failure count (they need the script's
/// arithmetic).
fn commands(
    store: &RedisStore,
    batch: impl Iterator<Item = Undo>,
    retries: Vec<FailedRelease>,
    since: u64,
) -> Vec<Outgoing> {
    let mut sends = Vec::new();
    let mut release_of: HashMap<SlotSet, usize> = HashMap::new();
    let mut release = |sends: &mut Vec<Outgoing>, kept: FailedRelease| {
        let member = script::member(store.instance, kept.member);
        if let Some(&i) = release_of.get(&kept.set) {
            let send: &mut Outgoing = &mut sends[i];
            send.cmd.arg(member);
            send.releases.push(kept);
            return;
        }
        let (key, shape) = store.keys.slot(kept.set.table, kept.set.key);
        let mut cmd = redis::cmd(if shape == Shape::HashSlot {
            "HDEL"
        } else {
            "ZREM"
        });
        cmd.arg(key);
        cmd.arg(member);
        release_of.insert(kept.set, sends.len());
        sends.push(Outgoing {
            cmd,
            releases: vec![kept],
        });
    };
    for kept in retries {
        release(&mut sends, kept);
    }
    for u in batch {
        match u {
            Undo::Release { set, member } => {
                release(&mut sends, FailedRelease { set, member, since })
            }
            other => sends.push(Outgoing {
                cmd: undo_cmd(&store.scripts.undo, &store.keys, store.instance, &[other]),
                releases: Vec::new(),
            }),
        }
    }
    sends
}

/// Sends `sends`; the releases of those that failed (a failed refund or failure count is
/// dropped; each failure is counted). Standalone: one pipeline, one round trip, that succeeds
/// or fails whole. Cluster: a pipeline goes to one node, so each command is sent on its own
/// (all at once).
async fn send(
    store: &Arc<RedisStore>,
    sends: Vec<Outgoing>,
    on_error: &(dyn Fn(&'static str) + Send + Sync),
) -> Vec<FailedRelease> {
    let Some(conn) = store.conn.load_full() else {
        on_error("undo");
        return sends.into_iter().flat_map(|s| s.releases).collect();
    };
    if store.target.is_cluster() {
        return send_alone(&conn, sends, on_error).await;
    }
    let mut pipe = redis::pipe();
    let mut releases = Vec::new();
    for s in sends {
        pipe.add_command(s.cmd).ignore();
        releases.extend(s.releases);
    }
    let mut c = (*conn).clone();
    match tokio::time::timeout(DEADLINE, pipe.query_async::<()>(&mut c)).await {
        Ok(Ok(())) => return Vec::new(),
        Ok(Err(e)) => {
            if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
                store.reload_scripts();
            }
        }
        Err(_) => {}
    }
    on_error("undo");
    releases
}

/// Sends each of `sends` on its own, all at once (Cluster); the releases of those that failed.
async fn send_alone(
    conn: &Conn,
    sends: Vec<Outgoing>,
    on_error: &(dyn Fn(&'static str) + Send + Sync),
) -> Vec<FailedRelease> {
    let calls: Vec<_> = sends
        .into_iter()
        .map(|s| {
            let mut c = conn.clone();
            let call = tokio::spawn(async move {
                tokio::time::timeout(DEADLINE, s.cmd.query_async::<redis::Value>(&mut c)).await
            });
            (call, s.releases)
        })
        .collect();
    let mut failed = Vec::new();
    for (call, releases) in calls {
        if !matches!(call.await, Ok(Ok(Ok(_)))) {
            on_error("undo");
            failed.extend(releases);
        }
    }
    failed
}

/// Something given back or counted after the decision: what the in-memory store does in
/// `gcra_refund`, `window_refund`, `window` (failures) and `slot_give`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    /// A bucket's charge.
    Gcra {
        /// Its table.
        table: Table,
        /// Its hash tag.
        tag: u64,
        /// The key hash.
        key: u64,
        /// µs to take back.
        increment: u64,
    },
    /// A counted request of a window's current window (a log: the event its request
    /// recorded).
    Window {
        /// Its table.
        table: Table,
        /// The key hash.
        key: u64,
        /// Its window (µs).
        window: u64,
        /// The request's member (a log's event is named by it).
        member: u64,
    },
    /// A failed response, counted in a window.
    Failure {
        /// Its table.
        table: Table,
        /// The key hash.
        key: u64,
        /// Its rule.
        rule: WindowRule,
        /// The request's member (a log's event is named by it).
        member: u64,
    },
    /// A slot.
    Release {
        /// Which set.
        set: SlotSet,
        /// The member that holds it.
        member: u64,
    },
}

/// `EVALSHA` of the undo script over `undos`.
pub(super) fn undo_cmd(script: &Script, keys: &Keys, instance: u64, undos: &[Undo]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(undos.len());
    let placed: Vec<(String, Shape)> = undos
        .iter()
        .map(|u| match *u {
            Undo::Gcra {
                table, tag, key, ..
            } => keys.of(table, (tag, key), TableKind::Gcra),
            Undo::Window { table, key, .. } | Undo::Failure { table, key, .. } => {
                keys.of(table, (key, key), TableKind::Window)
            }
            Undo::Release { set, .. } => keys.slot(set.table, set.key),
        })
        .collect();
    for (key, _) in &placed {
        cmd.arg(key);
    }
    for (u, (_, shape)) in undos.iter().zip(&placed) {
        match *u {
            Undo::Gcra { increment, .. } => cmd
                .arg(if *shape == Shape::HashBucket {
                    "h"
                } else {
                    "b"
                })
                .arg(increment),
            // A log's event is a member of its set, named as the request's.
            Undo::Window { member: m, .. } if *shape == Shape::Log => {
                cmd.arg("z").arg(script::member(instance, m))
            }
            Undo::Window { window, .. } => cmd.arg("q").arg(window),
            Undo::Failure {
                rule, member: m, ..
            } if *shape == Shape::Log => cmd
                .arg("g")
                .arg(rule.limit)
                .arg(rule.window)
                .arg(script::member(instance, m)),
            Undo::Failure { rule, .. } => cmd
                .arg("f")
                .arg(script::flag(script::sliding(&rule)))
                .arg(rule.limit)
                .arg(rule.window),
            Undo::Release { member: m, .. } => cmd
                .arg(if *shape == Shape::HashSlot { "p" } else { "z" })
                .arg(script::member(instance, m)),
        };
    }
    cmd
}
