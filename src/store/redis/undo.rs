//! What is given back after a decision — permits and fleet slots of finished requests, the
//! charges of requests a later limiter refused, failed responses counted against failure
//! quotas — queued without waiting and sent by one task in batches, off the request path.

use super::script::{self, ClientAsk, ClientReply, SlotSet, Undo};
use super::RedisStore;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Most undo operations waiting to be sent; past it they are dropped (and counted): permits
/// then expire by their TTL, refunds are lost (the client was charged for a refused request).
pub(super) const QUEUE: usize = 65_536;
/// Most operations in one undo script call.
const BATCH: usize = 256;
/// Deadline of an undo batch (off the request path).
const DEADLINE: Duration = Duration::from_millis(250);

impl RedisStore {
    /// Undo operations dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Queues an undo operation (never waits; a full queue drops it, and it is counted).
    pub fn undo(&self, undo: Undo) {
        if self.undo_tx.try_send(undo).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Gives back `increment` µs charged to bucket `key` under hash tag `tag` (a later limiter
    /// refused the request).
    pub(crate) fn refund_bucket(&self, tag: u64, key: u64, increment: u64) {
        self.undo(Undo::Bucket {
            tag,
            key,
            increment,
        });
    }

    /// Takes back one request counted against quota `index` of `key` in its current window
    /// of `window` µs.
    pub(crate) fn refund_quota(&self, index: usize, key: u64, window: u64) {
        self.undo(Undo::Quota { index, key, window });
    }

    /// Gives back, after its response, what a request decided here took as `member`: the
    /// permit of client `key`, if it took one, and a fleet slot, if it took one.
    pub(crate) fn release_request(&self, member: u64, key: Option<u64>, fleet: bool) {
        if let Some(key) = key {
            self.undo(Undo::Release {
                set: SlotSet::Client(key),
                member,
            });
        }
        if fleet {
            self.undo(Undo::Release {
                set: SlotSet::Fleet,
                member,
            });
        }
    }

    /// Counts a failed response of client `key` against failure quota `index` (its `rule`).
    pub(crate) fn count_failure(
        &self,
        index: usize,
        key: u64,
        rule: crate::math::window::WindowRule,
    ) {
        self.undo(Undo::Failure { index, key, rule });
    }

    /// Gives back the permit and fleet slot `ask` may have taken as `member`.
    pub(super) fn release_as(&self, ask: &ClientAsk, member: u64) {
        if let Some((key, _)) = ask.in_flight {
            self.undo(Undo::Release {
                set: SlotSet::Client(key),
                member,
            });
        }
        if ask.fleet.is_some() {
            self.undo(Undo::Release {
                set: SlotSet::Fleet,
                member,
            });
        }
    }

    /// Gives back everything the decide script took for `ask` (`reply`), as `member`.
    pub fn give_back(&self, ask: &ClientAsk, reply: &ClientReply, member: u64) {
        if reply.fleet_written {
            self.undo(Undo::Release {
                set: SlotSet::Fleet,
                member,
            });
        }
        self.give_back_rate(ask, reply);
        if let (true, Some((key, _))) = (reply.in_flight_written, ask.in_flight) {
            self.undo(Undo::Release {
                set: SlotSet::Client(key),
                member,
            });
        }
    }

    /// Gives back the rate charges the decide script wrote for `ask` (`reply`).
    pub(super) fn give_back_rate(&self, ask: &ClientAsk, reply: &ClientReply) {
        if !reply.rate_written {
            return;
        }
        for b in &ask.buckets {
            self.undo(Undo::Bucket {
                tag: b.tag,
                key: b.key,
                increment: b.increment,
            });
        }
        for q in ask.quotas.iter().filter(|q| q.count) {
            self.undo(Undo::Quota {
                index: q.index,
                key: q.key,
                window: q.rule.window,
            });
        }
    }
}

/// Sends queued undo operations in batches of up to [`BATCH`] until the store is gone.
pub(super) async fn run(
    store: std::sync::Weak<RedisStore>,
    mut rx: mpsc::Receiver<Undo>,
    on_error: Arc<dyn Fn(&'static str) + Send + Sync>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let Some(store) = store.upgrade() else { return };
        let Some(conn) = store.conn.load_full() else {
            on_error("undo");
            batch.clear();
            continue;
        };
        // Releases (nearly all of it) are plain HDELs (a client's permits) and ZREMs (the
        // fleet's slots), one per key with every member the batch gives back to it (the fleet's
        // set gets one ZREM per batch, not one per request);
        // refunds and failure counts need the script's arithmetic. Standalone: one pipeline,
        // one round trip. Cluster: a pipeline goes to one node, so each command is sent on its
        // own (all at once).
        let cluster = store.target.is_cluster();
        let mut pipe = redis::pipe();
        let mut alone = Vec::new();
        let mut releases: Vec<redis::Cmd> = Vec::new();
        let mut release_of: std::collections::HashMap<SlotSet, usize> = Default::default();
        let mut commands = Vec::with_capacity(batch.len());
        for u in batch.drain(..) {
            match u {
                Undo::Release { set, member } => {
                    let member = script::member(store.instance, member);
                    if let Some(&i) = release_of.get(&set) {
                        releases[i].arg(member);
                        continue;
                    }
                    let mut cmd = match set {
                        SlotSet::Client(key) => {
                            let mut cmd = redis::cmd("HDEL");
                            cmd.arg(store.keys.client(key));
                            cmd
                        }
                        SlotSet::Fleet => {
                            let mut cmd = redis::cmd("ZREM");
                            cmd.arg(store.keys.fleet());
                            cmd
                        }
                    };
                    cmd.arg(member);
                    release_of.insert(set, releases.len());
                    releases.push(cmd);
                }
                other => commands.push(script::undo_cmd(
                    &store.scripts.undo,
                    &store.keys,
                    store.instance,
                    &[other],
                )),
            }
        }
        for cmd in commands.into_iter().chain(releases) {
            if cluster {
                alone.push(cmd);
            } else {
                pipe.add_command(cmd).ignore();
            }
        }
        if cluster {
            let sends: Vec<_> = alone
                .into_iter()
                .map(|cmd| {
                    let mut c = (*conn).clone();
                    tokio::spawn(async move {
                        tokio::time::timeout(DEADLINE, cmd.query_async::<redis::Value>(&mut c))
                            .await
                    })
                })
                .collect();
            for send in sends {
                match send.await {
                    Ok(Ok(Ok(_))) => {}
                    _ => on_error("undo"),
                }
            }
            continue;
        }
        let mut c = (*conn).clone();
        let sent = tokio::time::timeout(DEADLINE, pipe.query_async::<()>(&mut c)).await;
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
                    store.reload_scripts();
                }
                on_error("undo");
            }
            Err(_) => on_error("undo"),
        }
    }
}
