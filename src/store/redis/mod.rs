//! Fleet mode: request_rate, concurrent_requests and fleet_usage keep their state in Redis,
//! shared by every server (docs/fleet.md). One script decides a client's limiters in one round
//! trip, the fleet reserve with them. Every call has a hard deadline;
//! an error, a timeout or a missing script makes the request decide on the local in-memory
//! limiters instead (the caller does), and a circuit breaker stops calling a failing Redis for
//! a backoff. What is given back later (permits, refunds, failure counts) goes through a
//! bounded queue to a task that sends it in batches, off the request path, and sends again
//! the permits and fleet slots whose release failed once Redis answers.

mod breaker;
mod conn;
mod detached;
mod pending;
mod reconcile;
mod script;
mod settings;
mod split;
mod undo;

use super::ask::Ask;
pub(crate) use breaker::{Breaker, BreakerParams, BreakerState};
#[cfg(not(feature = "redis-internals"))]
pub(crate) use script::ClientReply;
#[cfg(feature = "redis-internals")]
pub use script::ClientReply;
pub(crate) use script::Keys;
#[cfg(feature = "redis-internals")]
pub use script::SlotSet;
pub(crate) use settings::Cas;
#[cfg(not(feature = "redis-internals"))]
pub(crate) use undo::Undo;
#[cfg(feature = "redis-internals")]
pub use undo::Undo;

use super::{StoreError, Unanswered};
use crate::clock::Clock;
use crate::schema::{ConfigError, StoreConfig};
use arc_swap::ArcSwapOption;
use conn::{Conn, Target};
use script::Scripts;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The shared answers for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedAnswer {
    /// What the script answered.
    pub reply: ClientReply,
    /// The member the permits were taken as.
    pub member: u64,
}

/// Redis, as the limiters' shared store.
pub struct RedisStore {
    target: Target,
    /// Set once connected and the scripts are loaded.
    conn: ArcSwapOption<Conn>,
    keys: Keys,
    scripts: Scripts,
    timeout: Duration,
    ttl_us: u64,
    /// Names this process's permits.
    instance: u64,
    members: AtomicU64,
    breaker: Breaker,
    /// The breaker's clock.
    clock: Arc<dyn Clock>,
    undo_tx: mpsc::Sender<Undo>,
    undo_rx: Mutex<Option<mpsc::Receiver<Undo>>>,
    /// `conn` is set (read on every request: cheaper than loading it).
    connected: AtomicBool,
    /// The last call to Redis answered (a decision, an undo batch, a read, a heartbeat).
    answering: AtomicBool,
    /// A script reload is under way.
    reloading: AtomicBool,
    /// Undo operations dropped: the queue was full, or a failed release was given up.
    dropped: AtomicU64,
    /// Where the settings channel is subscribed: the URL, or each Cluster seed node.
    pubsub_urls: Vec<String>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("connected", &self.connected())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store for `config` (nothing is connected until [`start`](Self::start)) keeping the
    /// limiters' `tables` (`LimitersConfig::tables` lists them); `instance` names this
    /// process's slots; `clock` times the breaker.
    pub fn new(
        config: &StoreConfig,
        tables: &[super::TableSpec],
        instance: u64,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ConfigError> {
        let target = Target::new(config)?;
        let (undo_tx, undo_rx) = mpsc::channel(undo::QUEUE);
        Ok(Self {
            target,
            conn: ArcSwapOption::empty(),
            keys: Keys::new(&config.key_prefix, tables),
            scripts: Scripts::new(),
            timeout: config.timeout.get(),
            ttl_us: config.permit_ttl.get().as_micros() as u64,
            instance,
            // From 1: a request hold's member 0 means "local".
            members: AtomicU64::new(1),
            breaker: Breaker::new(BreakerParams::default()),
            clock,
            undo_tx,
            undo_rx: Mutex::new(Some(undo_rx)),
            connected: AtomicBool::new(false),
            answering: AtomicBool::new(true),
            reloading: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            pubsub_urls: config.url.iter().chain(&config.nodes).cloned().collect(),
        })
    }

    /// Whether a connection is up and the scripts were loaded on it.
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Whether the link to Redis works now: connected, the last call answered, and the
    /// breaker not open (what `/v1/state` shows as `connected`).
    pub fn link_up(&self) -> bool {
        self.connected()
            && self.answering.load(Ordering::Relaxed)
            && self.breaker_state() != BreakerState::Open
    }

    /// Notes whether a call to Redis answered (`ok`); written only when it changes.
    fn answered(&self, ok: bool) {
        if self.answering.load(Ordering::Relaxed) != ok {
            self.answering.store(ok, Ordering::Relaxed);
        }
    }

    /// Counts `n` releases given up (kept past the permit TTL, or past the most kept).
    fn drop_releases(&self, n: usize) {
        if n > 0 {
            self.dropped.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Whether a request should ask Redis now: connected, and the breaker not open (closed,
    /// or its backoff over so that a probe may go). What a request pays during an outage:
    /// two relaxed loads and a clock reading; it then decides on the local limiters.
    pub fn ready(&self) -> bool {
        self.connected() && self.breaker.state(self.now_us()) != BreakerState::Open
    }

    /// The breaker's state now.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state(self.now_us())
    }

    fn now_us(&self) -> u64 {
        self.clock.now().as_micros() as u64
    }

    /// Connects (in the background, retrying) and starts the task that sends undo
    /// operations; call inside a tokio runtime, once. `on_error` counts a failed call by op.
    pub fn start(self: &Arc<Self>, on_error: Arc<dyn Fn(&'static str) + Send + Sync>) {
        let Some(rx) = self
            .undo_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return; // started already
        };
        tokio::spawn(undo::run(Arc::downgrade(self), rx, on_error.clone()));
        let store = self.clone();
        tokio::spawn(async move {
            let mut wait = Duration::from_millis(50);
            while let Err(e) = store.connect().await {
                on_error("connect");
                tracing::warn!("redis store: cannot connect yet ({e}); limits stay local");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
            }
        });
    }

    async fn connect(&self) -> redis::RedisResult<()> {
        let conn = self.target.connect(self.timeout).await?;
        self.load_scripts(&conn).await?;
        self.conn.store(Some(Arc::new(conn)));
        self.answered(true);
        self.connected.store(true, Ordering::Release);
        tracing::info!("redis store: connected; limits are shared");
        Ok(())
    }

    async fn load_scripts(&self, conn: &Conn) -> redis::RedisResult<()> {
        let mut c = conn.clone();
        for (_, source) in self.scripts.all() {
            let _: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query_async(&mut c)
                .await?;
        }
        Ok(())
    }

    /// Reloads the scripts in the background (Redis answered NOSCRIPT: it restarted or was
    /// flushed); meanwhile requests decide locally.
    fn reload_scripts(self: &Arc<Self>) {
        if self.reloading.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            if let Some(conn) = store.conn.load_full() {
                let loaded =
                    tokio::time::timeout(Duration::from_secs(1), store.load_scripts(&conn)).await;
                if !matches!(loaded, Ok(Ok(()))) {
                    tracing::warn!("redis store: reloading the scripts failed; will retry on the next NOSCRIPT");
                }
            }
            store.reloading.store(false, Ordering::Release);
        });
    }

    /// Asks Redis for one request's shared limiters, in one round trip. `Err` means: decide
    /// locally.
    pub async fn answer(self: &Arc<Self>, ask: &Ask) -> Result<SharedAnswer, Unanswered> {
        self.answer_at(ask, 0).await
    }

    /// [`answer`](Self::answer) as of `at_us` µs since the Unix epoch instead of the server's
    /// clock (0): for tests that replay the in-memory limiters' vectors.
    pub async fn answer_at(
        self: &Arc<Self>,
        ask: &Ask,
        at_us: u64,
    ) -> Result<SharedAnswer, Unanswered> {
        let skip = |why: &'static str| Unanswered {
            op: "decide",
            error: StoreError::Failed(why.replace('_', " ")),
            skipped: Some(why),
        };
        let Some(conn) = self.conn.load_full() else {
            return Err(skip("not_connected"));
        };
        if !self.breaker.allow(self.now_us()) {
            return Err(skip("breaker_open"));
        }
        let n = self.members.fetch_add(1, Ordering::Relaxed);
        let reply = if self.target.is_cluster() {
            self.answer_parts(&conn, ask, n, at_us).await?
        } else {
            self.answer_one(&conn, ask, n, at_us).await?
        };
        self.breaker.success();
        Ok(SharedAnswer { reply, member: n })
    }

    /// One script for the whole ask (standalone Redis).
    async fn answer_one(
        self: &Arc<Self>,
        conn: &Conn,
        ask: &Ask,
        n: u64,
        at_us: u64,
    ) -> Result<ClientReply, Unanswered> {
        let member = script::member(self.instance, n);
        let cmd = script::decide_cmd(
            &self.scripts.decide,
            &self.keys,
            ask,
            &member,
            self.ttl_us,
            at_us,
        );
        let value: redis::Value = match self.call(conn, &cmd).await {
            Ok(value) => value,
            Err(e) => {
                // A call that timed out may still run on the server: give back the permits
                // it may have taken (harmless if it did not). Rate charges stay (the client
                // is charged for a request that may not have been counted).
                self.release_as(ask, n);
                return Err(e);
            }
        };
        script::decide_reply(ask, &value)
            .map_err(|e| Unanswered::failed(StoreError::Failed(e.to_string())))
    }

    /// Cluster: one script per hash tag, all sent at once, merged into one answer.
    async fn answer_parts(
        self: &Arc<Self>,
        conn: &Conn,
        ask: &Ask,
        n: u64,
        at_us: u64,
    ) -> Result<ClientReply, Unanswered> {
        let parts = split::split(&self.keys, ask);
        let calls: Vec<_> = parts
            .iter()
            .map(|part| {
                let (store, conn, ask) = (self.clone(), conn.clone(), part.ask.clone());
                tokio::spawn(async move { store.answer_one(&conn, &ask, n, at_us).await })
            })
            .collect();
        let mut replies = Vec::with_capacity(calls.len());
        let mut failed = None;
        for call in calls {
            let reply = call.await.unwrap_or_else(|e| {
                Err(Unanswered::failed(StoreError::Failed(format!(
                    "the call's task failed: {e}"
                ))))
            });
            match reply {
                Ok(reply) => replies.push(Some(reply)),
                Err(e) => {
                    failed.get_or_insert(e);
                    replies.push(None);
                }
            }
        }
        if let Some(error) = failed {
            // The request decides locally: give back what the parts that answered took.
            for (part, reply) in parts.iter().zip(&replies) {
                if let Some(reply) = reply {
                    self.give_back(&part.ask, reply, n);
                }
            }
            return Err(error);
        }
        let replies: Vec<ClientReply> = replies.into_iter().flatten().collect();
        let (merged, give_backs) = split::merge(ask, &parts, &replies);
        for ((part, reply), which) in parts.iter().zip(&replies).zip(give_backs) {
            self.give_back_groups(&part.ask, reply, n, &which);
        }
        Ok(merged)
    }

    async fn call<T: redis::FromRedisValue>(
        self: &Arc<Self>,
        conn: &Conn,
        cmd: &redis::Cmd,
    ) -> Result<T, Unanswered> {
        let mut c = conn.clone();
        let result = tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut c)).await;
        let error = match result {
            Ok(Ok(v)) => {
                self.answered(true);
                return Ok(v);
            }
            Err(_) => StoreError::Timeout,
            Ok(Err(e)) => {
                if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
                    self.reload_scripts();
                }
                StoreError::Failed(e.to_string())
            }
        };
        self.answered(false);
        self.breaker.failure(self.now_us());
        Err(Unanswered::failed(error))
    }

    /// `key`'s bucket TAT and its live permits, read without spending or taking anything (a
    /// peek), with the Redis server's clock (µs): one pipelined round trip of TIME and HGETALL
    /// of the client's hash.
    pub async fn read_client(
        self: &Arc<Self>,
        key: u64,
    ) -> Result<(u64, super::ClientReading), StoreError> {
        let Some(conn) = self.conn.load_full() else {
            return Err(StoreError::Failed("not connected to Redis".into()));
        };
        let mut pipe = redis::pipe();
        pipe.cmd("TIME").cmd("HGETALL").arg(self.keys.client(key));
        let mut c = (*conn).clone();
        type Reply = ((u64, u64), Vec<(String, String)>);
        let reply = tokio::time::timeout(self.timeout, pipe.query_async::<Reply>(&mut c)).await;
        self.answered(matches!(reply, Ok(Ok(_))));
        let ((secs, micros), fields) = match reply {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(StoreError::Failed(e.to_string())),
            Err(_) => return Err(StoreError::Timeout),
        };
        let now = secs * 1_000_000 + micros;
        // Field `t` is the bucket (0: full, as a missing one); every other field a permit,
        // valued when it was taken. A permit older than the TTL belongs to a server that died:
        // it no longer counts.
        let mut reading = super::ClientReading::default();
        for (field, value) in &fields {
            if field == "t" {
                // 'tat:step:tolerance', or a bare TAT (decide.lua).
                let mut parts = value.split(':').map(|p| p.parse::<u64>().unwrap_or(0));
                let tat = parts.next().unwrap_or(0);
                reading.tat = (tat != 0).then_some(tat);
                reading.step = parts.next().filter(|&s| s != 0);
                continue;
            }
            let value: u64 = value.parse().unwrap_or(0);
            if now.saturating_sub(value) < self.ttl_us {
                reading.in_flight += 1;
            }
        }
        Ok((now, reading))
    }

    /// The key names.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }
}
