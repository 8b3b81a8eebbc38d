//! The engine's keyed state as one part: the store the per-key limiters decide on here, and,
//! in fleet mode, the shared store behind it and how the two work together (`store.sync`).
//! Above it, nothing names the shared store's types: a request's ask is answered here
//! ([`Answer::answer_here`](super::Answer::answer_here)) or by the shared store
//! ([`Keyed::answer_shared`]), and what it took is [`Held`] wherever it was taken.

#[cfg(feature = "redis")]
use super::redis::RedisStore;
#[cfg(feature = "redis")]
use super::{Answer, Ask, HybridStore, Unanswered};
use super::{ClientReading, MemoryStore, Op, Store, StoreError, Table};
use crate::clock::Clock;
use crate::math::window::{WindowCheck, WindowRule};
use crate::schema::{ConfigError, StoreConfig};
use std::sync::Arc;

/// Where an admitted request's per-key permits (its concurrency permit, its fleet slot) are
/// held: in this process's store, or in the shared store as a numbered member.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held(u64);

impl Held {
    /// In this process's store.
    pub(crate) const LOCAL: Held = Held(0);

    /// In the shared store, as `member` (members are numbered from 1).
    #[cfg(feature = "redis")]
    pub(crate) fn shared(member: u64) -> Self {
        Held(member)
    }
}

/// Where the per-key limiters keep their state.
pub(crate) struct Keyed {
    /// What the chain decides on here: the in-memory store, an app's own, or with
    /// `local_first` the hybrid store (local buckets reconciled with Redis in rounds).
    local: Arc<dyn Store>,
    /// The shared store (fleet mode).
    #[cfg(feature = "redis")]
    shared: Option<Arc<RedisStore>>,
    /// With `store.sync: local_first`: `local` itself, as the hybrid store it is.
    #[cfg(feature = "redis")]
    hybrid: Option<Arc<HybridStore>>,
}

/// The shared store's state, for the metrics and the admin API.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SharedStatus {
    /// The link works: connected with its scripts loaded, the last call answered, and the
    /// breaker not open.
    pub(crate) connected: bool,
    /// The circuit breaker: `closed`, `open` or `half_open`.
    pub(crate) breaker: &'static str,
    /// The breaker as a gauge (0 closed, 1 open, 0.5 half open).
    pub(crate) breaker_gauge: f64,
    /// Undo operations dropped: their queue was full, or a failed release was given up.
    pub(crate) undo_dropped: u64,
    /// Shared limits are in use: connected, and the breaker closed.
    pub(crate) in_use: bool,
    /// `store.sync: local_first` (requests decide locally; rounds reconcile).
    pub(crate) local_first: bool,
}

impl Keyed {
    /// The keyed state `config` (`store:`) asks for: `app`'s store if the app brought one,
    /// else an in-memory one keeping the limiters' `tables`; with
    /// `store.kind: redis`, the shared store behind it (connected by [`start`](Self::start)),
    /// and with `sync: local_first` a hybrid store that decides locally, reconciling the
    /// bucket table `reconciled` with the fleet's. Validation has refused `redis` without the
    /// feature.
    pub(crate) fn build(
        config: &StoreConfig,
        (tables, reconciled): (&[super::TableSpec], Table),
        app: Option<Arc<dyn Store>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ConfigError> {
        let memory = || MemoryStore::with_tables(tables);
        #[cfg(feature = "redis")]
        if config.kind == crate::schema::StoreKind::Redis {
            let instance = crate::rng::os_seed() ^ u64::from(std::process::id());
            let shared = Arc::new(RedisStore::new(config, tables, instance, clock)?);
            // local_first: local decisions over buckets reconciled with Redis in rounds.
            let hybrid = (config.sync == crate::schema::StoreSync::LocalFirst)
                .then(|| Arc::new(HybridStore::new(memory(), reconciled)));
            let local = match (&hybrid, app) {
                (Some(hybrid), _) => hybrid.clone() as Arc<dyn Store>,
                (None, Some(app)) => app,
                (None, None) => Arc::new(memory()),
            };
            return Ok(Self::fleet(local, shared, hybrid));
        }
        let _ = (config, clock, reconciled);
        Ok(Self::local_only(app.unwrap_or_else(|| Arc::new(memory()))))
    }

    /// Connects the shared store and starts its tasks (the undo queue, and with local_first
    /// the reconciling rounds every `sync_interval`); `on_error` counts a failed call by its
    /// `op`. Nothing to do without a shared store.
    #[cfg(feature = "redis")]
    pub(crate) fn start(
        &self,
        clock: Arc<dyn Clock>,
        sync_interval: std::time::Duration,
        on_error: Arc<dyn Fn(&'static str) + Send + Sync>,
    ) {
        if let Some(shared) = &self.shared {
            shared.start(on_error.clone());
            if let Some(hybrid) = &self.hybrid {
                hybrid.start(shared, clock, sync_interval, on_error);
            }
        }
    }

    /// The shared store's state, in fleet mode.
    pub(crate) fn shared_status(&self) -> Option<SharedStatus> {
        #[cfg(feature = "redis")]
        if let Some(shared) = &self.shared {
            let breaker = shared.breaker_state();
            let connected = shared.link_up();
            return Some(SharedStatus {
                connected,
                in_use: connected && breaker == super::redis::BreakerState::Closed,
                breaker: breaker.as_str(),
                breaker_gauge: breaker.as_gauge(),
                undo_dropped: shared.dropped(),
                local_first: self.hybrid.is_some(),
            });
        }
        None
    }

    /// Whether a client's state lives in the shared store, read only by a round trip
    /// ([`read_shared`](Self::read_shared)): fleet mode with `store.sync: per_request`.
    pub(crate) fn reads_shared(&self) -> bool {
        #[cfg(feature = "redis")]
        if self.per_request().is_some() {
            return true;
        }
        false
    }

    /// Reads `key`'s bucket and permits from the shared store without spending anything
    /// (one round trip): `(now µs on the store's clock, reading)`. An error when the client's
    /// state is local ([`reads_shared`](Self::reads_shared) says which).
    pub(crate) async fn read_shared(&self, key: u64) -> Result<(u64, ClientReading), StoreError> {
        #[cfg(feature = "redis")]
        if let Some(shared) = self.per_request() {
            return shared.read_client(key).await;
        }
        let _ = key;
        Err(StoreError::Failed("a client's state is local here".into()))
    }

    /// Checks `op` (a quota's window, counting nothing) in the shared store: a quota read
    /// without spending it (one round trip). An error when the client's state is local.
    pub(crate) async fn check_shared(&self, op: Op) -> Result<WindowCheck, StoreError> {
        #[cfg(feature = "redis")]
        if let Some(shared) = self.per_request() {
            let mut ask = Ask::default();
            ask.begin(0, false, 0);
            ask.push(op);
            let answer = shared.answer_detached(ask).await.map_err(|u| u.error)?;
            return match answer.reply.replies.first() {
                Some(Some(super::Reply::Window(check))) => Ok(*check),
                _ => Err(StoreError::Failed("no window in the reply".into())),
            };
        }
        let _ = op;
        Err(StoreError::Failed("a client's state is local here".into()))
    }

    /// Keyed state kept in `local` alone.
    pub(crate) fn local_only(local: Arc<dyn Store>) -> Self {
        Self {
            local,
            #[cfg(feature = "redis")]
            shared: None,
            #[cfg(feature = "redis")]
            hybrid: None,
        }
    }

    /// Fleet mode: `local` decides when `shared` cannot answer; with `hybrid` (local_first),
    /// requests never ask `shared` and `hybrid` is reconciled with it in rounds.
    #[cfg(feature = "redis")]
    fn fleet(
        local: Arc<dyn Store>,
        shared: Arc<RedisStore>,
        hybrid: Option<Arc<HybridStore>>,
    ) -> Self {
        Self {
            local,
            shared: Some(shared),
            hybrid,
        }
    }

    /// The store the chain decides on here.
    #[inline]
    pub(crate) fn local(&self) -> &dyn Store {
        &*self.local
    }

    /// The shared store, in fleet mode (the operator's link to the fleet's settings uses
    /// its connection).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn shared(&self) -> Option<&Arc<RedisStore>> {
        self.shared.as_ref()
    }

    /// The shared store every request asks first (fleet mode, `store.sync: per_request`).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn per_request(&self) -> Option<&Arc<RedisStore>> {
        self.shared.as_ref().filter(|_| self.hybrid.is_none())
    }

    /// Whether requests ask the shared store before they are decided (fleet mode,
    /// `store.sync: per_request`, and the store is ready to be asked).
    #[cfg(feature = "redis")]
    #[inline]
    pub(crate) fn asks_first(&self) -> bool {
        self.per_request().is_some_and(|shared| shared.ready())
    }

    /// The shared store's answer to `ask`, in one round trip; `Err`: answer on the local
    /// store instead.
    #[cfg(feature = "redis")]
    pub(crate) async fn answer_shared(&self, ask: &Ask) -> Result<Answer<'_>, Unanswered> {
        match &self.shared {
            Some(shared) => Ok(shared.answer_detached(ask.clone()).await?.answer(self, ask)),
            None => Err(Unanswered {
                op: "decide",
                error: super::StoreError::Failed("no shared store".into()),
                skipped: Some("not_connected"),
            }),
        }
    }

    /// Gives back what `op` wrote for a request whose answer is held as `held`: a bucket's
    /// charge or a window's count (a later limiter refused it; `unix` µs since the epoch is
    /// the window it was counted in, here), or a slot.
    pub(crate) fn refund(&self, held: Held, op: &Op, unix: u64) {
        if let Op::Slot { table, key, .. } = *op {
            self.release(held, table, key);
            return;
        }
        #[cfg(feature = "redis")]
        if let Some(shared) = self.shared.as_ref().filter(|_| held != Held::LOCAL) {
            shared.refund(op, held.0);
            return;
        }
        let _ = held;
        match *op {
            Op::Gcra {
                table, key, charge, ..
            } => {
                let _ = self.local.gcra_refund(table, key, charge.increment);
            }
            Op::Window {
                table, key, rule, ..
            } => {
                let _ = self.local.window_refund(table, key, unix, &rule);
            }
            Op::Slot { .. } => {}
        }
    }

    /// Gives back, once its request is done, a slot of `key` in `table` held as `held`: in
    /// the shared store, or here.
    #[inline]
    pub(crate) fn release(&self, held: Held, table: Table, key: u64) {
        #[cfg(feature = "redis")]
        if let Some(shared) = self.shared.as_ref().filter(|_| held != Held::LOCAL) {
            shared.release(held.0, table, key);
            return;
        }
        let _ = held;
        self.local.slot_give(table, key);
    }

    /// Counts a failed response against the windows `windows` in the shared store, when its
    /// request was decided there (`held`); false when it was decided here (the caller counts
    /// it in the local store, as of its own clock).
    pub(crate) fn count_failures_shared(
        &self,
        held: Held,
        windows: impl Iterator<Item = Op>,
    ) -> bool {
        #[cfg(feature = "redis")]
        if let Some(shared) = self.shared.as_ref().filter(|_| held != Held::LOCAL) {
            for op in windows {
                shared.count_failure(op, held.0);
            }
            return true;
        }
        let _ = (held, windows);
        false
    }

    /// Drops idle local state at `now` µs (and `unix_now` µs since the epoch; `windows`:
    /// each window table's rule).
    pub(crate) fn evict_idle(&self, now: u64, unix_now: u64, windows: &[(Table, WindowRule)]) {
        self.local.evict_idle(now, unix_now, windows);
    }
}
