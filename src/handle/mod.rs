//! The [`Brownout`] handle an app embeds: it owns the engine, starts and stops the actors, and
//! is how the middleware, the admin server and the app reach both. Cheap to clone; every clone
//! shares the same state.

mod admin;
mod builder;
mod error;
mod front;
mod operate;
mod peek;

pub use crate::engine::Settings;
pub use crate::hook::{KeyHook, PlanHook, TierHook};
#[cfg(feature = "actix")]
pub use admin::AdminServer;
#[cfg(feature = "tower")]
pub use admin::{AdminFuture, AdminServerFuture, AdminService, HyperAdminServer};
pub use builder::BrownoutBuilder;
pub use error::{Error, Report};
pub use peek::{BucketState, ClientState, InFlightState, QuotaState};

use crate::actors::{self, Actors, SamplerMsg};
use crate::classify::RequestFacts;
use crate::config::Config;
use crate::control::{RuntimeRegistry, ShedPlan, UtilizationSource};
use crate::engine::{judge, Engine, RequestHold, Verdict};
use crate::hook::Hooks;
use crate::limiter::{LimiterName, Rejection, Request};
use crate::metrics::Outcome;
use crate::ops::{AuditLog, PendingRevert};
use crate::rng::SplitMix64;
use crate::tier::PerTier;
use std::sync::{Arc, Mutex, PoisonError};

thread_local! {
    /// The random stream of [`Brownout::check`] on this thread.
    static CHECK_RNG: std::cell::Cell<Option<SplitMix64>> = const { std::cell::Cell::new(None) };
}

/// The answer of [`Brownout::check`].
///
/// # Examples
/// A job runner asking before each job, with a bucket of one job that barely refills:
/// ```
/// use brownout::classify::RequestFacts;
/// use brownout::{Brownout, Config, Decision};
///
/// let brownout = Brownout::builder(Config::builder().rate_limit(0.001, 1).build()?).build()?;
/// let job = RequestFacts::new("POST", "/jobs").with_authorization(b"Bearer sk_live_tenant");
/// match brownout.check(&job, None) {
///     // Hold the admission while the job runs: dropping it gives back what it holds.
///     Decision::Allowed(admitted) => drop(admitted),
///     Decision::Rejected(r) => unreachable!("the bucket holds one: {r:?}"),
/// }
/// match brownout.check(&job, None) {
///     Decision::Rejected(r) => {
///         assert_eq!(r.status.as_u16(), 429);
///         assert!(r.retry_after.as_secs() > 0, "when to come back");
///     }
///     Decision::Allowed(_) => unreachable!("the bucket is empty"),
/// }
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug)]
pub enum Decision {
    /// Go ahead; keep the value until the request is done.
    Allowed(Admitted),
    /// Answer with this rejection.
    Rejected(Rejection),
}

/// An admitted request: its outcome and the hold that releases its in-flight count and
/// permits when dropped.
#[derive(Debug)]
pub struct Admitted {
    /// allowed, dark_rejected or failed_open.
    pub outcome: Outcome,
    _hold: RequestHold,
}

/// The handle an app embeds: make middleware from it, start its actors, serve its admin API.
///
/// # Examples
/// ```no_run
/// use actix_web::{web, App, HttpServer};
/// use brownout::Brownout;
///
/// #[actix_web::main]
/// async fn main() -> Result<(), brownout::Report> {
///     let brownout = Brownout::from_config_file("config.yaml")?;
///     brownout.start()?;
///     let b = brownout.clone();
///     HttpServer::new(move || App::new().wrap(b.middleware()).route("/", web::get().to(|| async { "hi" })))
///         .bind("127.0.0.1:8080")?
///         .run()
///         .await?;
///     brownout.shutdown().await;
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct Brownout {
    pub(crate) inner: Arc<Inner>,
}

/// What the handle holds besides the engine: the configuration it started from, the app's
/// hooks, the admin token, and the actors' slot.
pub(crate) struct Inner {
    pub(crate) engine: Arc<Engine>,
    pub(crate) config: Arc<Config>,
    /// The app's hooks, which the middleware runs on each request.
    pub(crate) hooks: Hooks,
    /// The actix worker runtimes, registered by the middleware for the `runtime` source.
    pub(crate) runtimes: Arc<RuntimeRegistry>,
    pub(crate) admin_token: String,
    pub(crate) admin_token_generated: bool,
    /// The sources, until `start` hands them to the sampler.
    pending_sources: Mutex<Option<Vec<Box<dyn UtilizationSource>>>>,
    /// Reverts from the overrides file, until `start` hands them to the operator.
    pending_reverts: Mutex<Vec<PendingRevert>>,
    /// The running actors. Held only to read or swap the slot, never across an await, so no
    /// caller ever waits on it for long or fails on it.
    actors: Mutex<Option<Actors>>,
    /// The file the configuration came from (what a reload reads), if any.
    config_file: Option<crate::ops::ConfigFile>,
    pub(crate) audit: Arc<Mutex<AuditLog>>,
    /// Whether this instance runs the fleet's settings (the operator keeps it up to date).
    pub(crate) fleet_status: Arc<Mutex<crate::ops::FleetStatus>>,
    /// What the overrides file held at start and is not in force (`/v1/state`).
    pub(crate) restored: crate::ops::restore::RestoreReport,
}

impl std::fmt::Debug for Brownout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Brownout")
            .field("version", &self.settings().version)
            .finish_non_exhaustive()
    }
}

impl Brownout {
    /// A builder for `config`.
    pub fn builder(config: Config) -> BrownoutBuilder {
        BrownoutBuilder {
            config,
            clock: None,
            seed: None,
            custom: None,
            hooks: Hooks::default(),
            admin_token: None,
            store: None,
            config_path: None,
        }
    }

    /// Loads, validates and builds from a YAML file, with defaults for every injection.
    /// SIGHUP and [`reload_config`](Self::reload_config) read the same file again.
    ///
    /// # Errors
    /// [`Error::Config`] when the file cannot be read or does not validate (the message names
    /// the file, the key and what was expected); [`Error::Source`] when a utilization source
    /// cannot be set up.
    pub fn from_config_file(path: impl AsRef<std::path::Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        Self::builder(Config::load(path)?).config_file(path).build()
    }

    /// Starts the actors on the current tokio runtime: the sampler and controller, the
    /// evictor, the operator (admin changes), and, with `admin.reload_on_sighup` (the default),
    /// a SIGHUP listener that reloads the configuration file; from then on SIGHUP never ends
    /// the process. Calling it again does nothing; it never blocks or panics on a concurrent
    /// call.
    ///
    /// # Errors
    /// [`Error::NoRuntime`] outside a tokio (or actix) runtime.
    ///
    /// # Panics
    /// Never: a concurrent `start`, change or sample only waits for the slot an instant.
    pub fn start(&self) -> Result<(), Error> {
        tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let inner = &self.inner;
        #[cfg(feature = "redis")]
        {
            let engine = Arc::downgrade(&inner.engine);
            let on_error: Arc<dyn Fn(&'static str) + Send + Sync> = Arc::new(move |op| {
                if let Some(engine) = engine.upgrade() {
                    engine.metrics().shared_store_error("redis", op);
                }
            });
            inner.engine.keyed().start(
                inner.engine.clock().clone(),
                inner.config.store.sync_interval.get(),
                on_error,
            );
        }
        let taken = inner
            .pending_sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(sources) = taken {
            let pending = std::mem::take(
                &mut *inner
                    .pending_reverts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            let ops = crate::ops::OperatorSetup {
                engine: inner.engine.clone(),
                config: inner.config.clone(),
                audit: inner.audit.clone(),
                pending,
                status: inner.fleet_status.clone(),
            };
            let reload = inner
                .config
                .admin
                .reload_on_sighup
                .then(|| inner.config_file.clone());
            let actors = actors::spawn(inner.engine.clone(), sources, ops, reload);
            *self.actors_slot() = Some(actors);
        }
        Ok(())
    }

    fn actors_slot(&self) -> std::sync::MutexGuard<'_, Option<Actors>> {
        self.inner
            .actors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The operator's mailbox, while the actors run.
    pub(crate) fn operator(&self) -> Option<tokio::sync::mpsc::Sender<crate::ops::OpsMsg>> {
        self.actors_slot().as_ref().map(|a| a.operator.clone())
    }

    /// Stops the actors and waits for them. The middleware keeps working (it fails open once
    /// the last plan goes stale).
    ///
    /// # Cancel safety
    /// The actors are told to stop before the first await: dropping the future early leaves
    /// them stopping on their own.
    pub async fn shutdown(&self) {
        let actors = self.actors_slot().take();
        if let Some(actors) = actors {
            actors.stop().await;
        }
    }

    /// The decision the middleware would make, for code outside actix and for benchmarks:
    /// classify `facts`, run every limiter, count the outcome. Hold the [`Decision::Allowed`]
    /// value while the request runs: it carries the in-flight count and the limiter permits.
    /// (RateLimit fields and failure-counting quotas are the middleware's job.) It answers at
    /// once, so the per-key limiters decide on this process's store: in fleet mode with
    /// `store.sync: per_request`, only the middleware asks Redis.
    ///
    /// # Examples
    /// A request outside actix (a gRPC call, a job from a queue), against a bucket of 2:
    /// ```
    /// use brownout::classify::RequestFacts;
    /// use brownout::{Brownout, Config, Decision};
    ///
    /// let config = Config::builder().rate_limit(0.001, 2).build()?;
    /// let brownout = Brownout::builder(config).build()?;
    /// let facts = RequestFacts::new("GET", "/v1/items").with_authorization(b"Bearer sk_live_42");
    /// let first = brownout.check(&facts, None); // hold it while the work runs
    /// assert!(matches!(first, Decision::Allowed(_)));
    /// assert!(matches!(brownout.check(&facts, None), Decision::Allowed(_)));
    /// match brownout.check(&facts, None) {
    ///     Decision::Rejected(r) => assert_eq!(r.status.as_u16(), 429),
    ///     Decision::Allowed(_) => unreachable!("the bucket holds two"),
    /// }
    /// # Ok::<(), brownout::Report>(())
    /// ```
    pub fn check(&self, facts: &RequestFacts<'_>, plan: Option<&str>) -> Decision {
        let engine = &self.inner.engine;
        let settings = engine.settings().load();
        let classified = settings.classifier.classify(facts);
        let request = Request {
            tier: classified.tier,
            key: classified.key,
            ip: classified.ip,
            method: facts.method,
            path: facts.path,
            plan,
            preflight: facts.preflight,
            paid: false,
        };
        let verdict = CHECK_RNG.with(|cell| {
            // Each thread draws from its own stream: no shared counter on this path.
            let mut rng = cell.take().unwrap_or_else(|| engine.random_stream());
            let verdict = judge(engine, &settings, &request, (&mut rng, false), None);
            cell.set(Some(rng));
            verdict
        });
        match verdict {
            Verdict::Reject(rejection, _) => Decision::Rejected(rejection),
            // An answer given at once cannot wait for its turn: refused as `excess: refuse`
            // would, its turn given back.
            Verdict::Pace(paced) => Decision::Rejected(crate::http::refuse_paced(engine, &paced).0),
            Verdict::Allow(mut admission) => {
                let admission_outcome = admission.outcome;
                let mut hold = RequestHold::admit(engine.clone(), classified.tier, &mut admission);
                if let (Some(route), true) = (facts.route, hold.learns_latency()) {
                    let routes = engine.adaptive().routes();
                    hold.set_route(routes.of_pattern(facts.method, route, classified.tier));
                }
                Decision::Allowed(Admitted {
                    outcome: admission_outcome,
                    _hold: hold,
                })
            }
        }
    }

    /// Samples utilization now (outside the regular interval) and returns the plan that
    /// results; `None` if the actors are not running.
    ///
    /// # Cancel safety
    /// Dropping the future may still let the sample happen (the plan is then published as
    /// usual); nothing is left half done.
    pub async fn sample_now(&self) -> Option<ShedPlan> {
        let sampler = self.actors_slot().as_ref()?.sampler.clone();
        let (reply, answer) = tokio::sync::oneshot::channel();
        sampler.send(SamplerMsg::SampleNow(reply)).await.ok()?;
        answer.await.ok()
    }

    /// The plan the middleware currently applies.
    pub fn plan(&self) -> ShedPlan {
        self.inner.engine.plan().load()
    }

    /// The live settings.
    pub fn settings(&self) -> Arc<Settings> {
        self.inner.engine.settings().load_full()
    }

    /// The configuration this handle was built from.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// Requests in progress through the middleware, per tier. While worker_utilization and
    /// adaptive_concurrency are both off (nothing reads this count then) and
    /// `limiters.deadline.cancel` is off, a request that holds no permit (no
    /// concurrent_requests or fleet_usage slot) and writes no RateLimit field or failure
    /// count passes straight through, uncounted: it pays for no response future.
    pub fn in_flight(&self) -> PerTier<i64> {
        self.inner.engine.in_flight().per_tier()
    }

    /// Every metric in the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        #[cfg(feature = "redis")]
        if let Some(shared) = self.inner.engine.keyed().shared_status() {
            let metrics = self.inner.engine.metrics();
            metrics.publish_breaker("redis", shared.breaker_gauge);
            metrics.publish_undo_dropped("redis", shared.undo_dropped);
        }
        let store = self.inner.engine.keyed().local();
        let metrics = self.inner.engine.metrics();
        for limiter in LimiterName::ALL {
            if let Some(keys) = tracked_keys(store, limiter) {
                metrics.publish_tracked_keys(limiter, keys);
            }
        }
        self.inner
            .engine
            .metrics()
            .render(self.inner.engine.in_flight())
    }

    /// Where keyed limiter state lives: `("memory", true, "closed")`, or in fleet mode
    /// `("redis", connected, breaker)` with the breaker `closed`, `open` or `half_open`
    /// (shared limits are in use when connected and closed; otherwise limits are local).
    pub fn store_state(&self) -> (&'static str, bool, &'static str) {
        if let Some(shared) = self.inner.engine.keyed().shared_status() {
            return ("redis", shared.connected, shared.breaker);
        }
        ("memory", true, "closed")
    }

    /// Where this instance's settings come from (`admin.scope`) and whether it runs the
    /// fleet's.
    pub(crate) fn fleet_status(&self) -> crate::ops::FleetStatus {
        self.inner
            .fleet_status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Keys this process tracks for `limiter` (request_rate: buckets and quota windows;
    /// concurrent_requests: keys holding a permit); `None` for a limiter with no per-key
    /// state.
    pub fn tracked_keys(&self, limiter: LimiterName) -> Option<usize> {
        tracked_keys(self.inner.engine.keyed().local(), limiter)
    }

    /// Drops idle keyed state now (the evictor actor does this every `eviction_interval`).
    pub fn evict_idle(&self) {
        self.inner.engine.evict_idle();
    }

    fn publish_settings(&self) {
        let engine = &self.inner.engine;
        engine.settings().load().publish(engine.metrics());
        // 1 with admin.scope local (an instance runs its own settings); in the fleet, 0 until
        // the fleet's settings are read.
        let in_sync = self.fleet_status().in_sync();
        engine.metrics().publish_fleet_in_sync(in_sync);
    }
}

/// Keys `store` tracks in `limiter`'s tables, summed; `None` when it counts none of them.
fn tracked_keys(store: &dyn crate::store::Store, limiter: LimiterName) -> Option<usize> {
    limiter
        .tables()
        .filter_map(|table| store.tracked_keys(table))
        .reduce(|a, b| a + b)
}
