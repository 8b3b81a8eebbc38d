//! The [`Brownout`] handle: validated settings, the published plan, metrics, and the actors
//! that keep the plan up to date. Cheap to clone; every clone shares the same state.

use crate::classify::Classifier;
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, ConfigError, LimitersConfig, Mode, SourceKind};
use crate::control::actors::{self, Actors, SamplerMsg};
use crate::control::{
    ControllerParams, CpuSource, InFlight, InFlightSource, RuntimeRegistry, RuntimeSource,
    ShedPlan, SourceError, UtilizationSource,
};
use crate::http::BrownoutMiddleware;
use crate::limiter::request_rate::RateRules;
use crate::limiter::window::WindowRule;
use crate::logging::LogGate;
use crate::metrics::Metrics;
use crate::store::{MemoryStore, Store};
use crate::tier::{PerTier, Tier};
use actix_web::dev::ServiceRequest;
use arc_swap::ArcSwap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A user hook that overrides the tier of a request (`None` keeps the built-in rules).
pub type TierHook = Arc<dyn Fn(&ServiceRequest) -> Option<Tier> + Send + Sync>;

/// A user hook that names the request-rate plan of a request (`None`: the default plan).
pub type PlanHook = Arc<dyn Fn(&ServiceRequest) -> Option<Arc<str>> + Send + Sync>;

/// Why brownout could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A utilization source could not be set up.
    #[error("{0}")]
    Source(#[from] SourceError),
    /// `start` was called outside a tokio runtime.
    #[error("Brownout::start must be called inside a tokio (or actix) runtime")]
    NoRuntime,
    /// The admin server could not be set up.
    #[error("admin server: {0}")]
    Admin(String),
}

/// The live, validated settings: swapped atomically as a whole, read without locks.
#[derive(Debug)]
pub struct Settings {
    /// Bumped by every accepted change.
    pub version: u64,
    /// While engaged, every limiter is off.
    pub kill_switch: bool,
    /// The limiter blocks.
    pub limiters: LimitersConfig,
    /// The compiled classifier.
    pub classifier: Classifier,
    /// The compiled request-rate rules.
    pub rules: RateRules,
}

impl Settings {
    /// Compiles validated limiter settings.
    pub fn new(
        version: u64,
        kill_switch: bool,
        limiters: LimitersConfig,
        classifier: Classifier,
    ) -> Result<Self, ConfigError> {
        let rules = RateRules::compile(&limiters.request_rate)
            .map_err(|m| ConfigError::invalid("limiters.request_rate", m))?;
        Ok(Self {
            version,
            kill_switch,
            limiters,
            classifier,
            rules,
        })
    }

    /// Each limiter's configured mode, in check order.
    pub fn modes(&self) -> [Mode; 4] {
        let l = &self.limiters;
        [
            l.request_rate.mode,
            l.concurrent_requests.mode,
            l.fleet_usage.mode,
            l.worker_utilization.mode,
        ]
    }
}

/// State shared by the middleware instances, the actors and the admin server.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) settings: ArcSwap<Settings>,
    pub(crate) plan: ArcSwap<ShedPlan>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) metrics: Metrics,
    pub(crate) in_flight: Arc<InFlight>,
    pub(crate) runtimes: Arc<RuntimeRegistry>,
    pub(crate) tier_hook: Option<TierHook>,
    pub(crate) plan_hook: Option<PlanHook>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) seed: u64,
    pub(crate) instances: AtomicU64,
    pub(crate) admin_token: String,
    pub(crate) admin_token_generated: bool,
    fail_open_log: LogGate,
    dark_log: LogGate,
    pending_sources: Mutex<Option<Vec<Box<dyn UtilizationSource>>>>,
    actors: tokio::sync::Mutex<Option<Actors>>,
}

impl Shared {
    /// Counts a fail-open and logs it, at most once per 10 s (with a count of the rest).
    pub(crate) fn fail_open(
        &self,
        limiter: &'static str,
        reason: &'static str,
        message: impl FnOnce() -> String,
    ) {
        self.metrics.fail_open(limiter, reason);
        if let Some(held_back) = self.fail_open_log.open(self.clock.now()) {
            tracing::warn!(
                limiter,
                reason,
                suppressed = held_back,
                "failing open: {}",
                message()
            );
        }
    }
}

impl Shared {
    /// Drops full buckets, expired windows and keys with nothing in flight.
    pub(crate) fn evict_idle(&self) {
        let settings = self.settings.load();
        let rules: Vec<WindowRule> = settings.rules.quotas.iter().map(|q| q.rule).collect();
        let now = self.clock.now().as_micros() as u64;
        self.store.evict_idle(now, &rules);
    }

    /// Logs a dark-mode rejection, at most once per 10 s (with a count of the rest).
    pub(crate) fn dark_rejected(&self, limiter: &'static str, tier: Tier) {
        if let Some(held_back) = self.dark_log.open(self.clock.now()) {
            tracing::info!(
                limiter,
                tier = tier.as_str(),
                suppressed = held_back,
                "dark mode: would have rejected this request"
            );
        }
    }
}

/// Builds a [`Brownout`] from a [`Config`] and optional injections.
pub struct BrownoutBuilder {
    config: Config,
    clock: Option<Arc<dyn Clock>>,
    seed: Option<u64>,
    custom: Option<Box<dyn UtilizationSource>>,
    tier_hook: Option<TierHook>,
    plan_hook: Option<PlanHook>,
    admin_token: Option<String>,
}

impl BrownoutBuilder {
    /// Uses `clock` instead of the system clock (tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Seeds the random draws and the key hash (default: from the OS).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Registers the app's own utilization gauge (`source: custom` in the config).
    pub fn custom_source(mut self, source: impl UtilizationSource) -> Self {
        self.custom = Some(Box::new(source));
        self
    }

    /// Overrides the tier of requests for which `hook` returns `Some`. A panicking hook fails
    /// open to the built-in rules.
    pub fn tier_hook(
        mut self,
        hook: impl Fn(&ServiceRequest) -> Option<Tier> + Send + Sync + 'static,
    ) -> Self {
        self.tier_hook = Some(Arc::new(hook));
        self
    }

    /// Names the request-rate plan of requests for which `hook` returns `Some` (e.g. from the
    /// customer record the app already loaded). A panicking hook fails open to the default plan.
    pub fn plan_hook(
        mut self,
        hook: impl Fn(&ServiceRequest) -> Option<Arc<str>> + Send + Sync + 'static,
    ) -> Self {
        self.plan_hook = Some(Arc::new(hook));
        self
    }

    /// Sets the admin token directly instead of reading `admin.token_env`.
    pub fn admin_token(mut self, token: impl Into<String>) -> Self {
        self.admin_token = Some(token.into());
        self
    }

    /// Validates everything and builds the handle (actors are started by [`Brownout::start`]).
    pub fn build(self) -> Result<Brownout, Error> {
        self.config.validate()?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock::new()));
        let seed = self.seed.unwrap_or_else(crate::rng::os_seed);
        let classifier = Classifier::new(&self.config.classifier, seed)
            .map_err(|m| ConfigError::invalid("classifier.critical", m))?;
        let in_flight = Arc::new(InFlight::default());
        let runtimes = Arc::new(RuntimeRegistry::default());
        let wu = &self.config.limiters.worker_utilization;
        let settings = Settings::new(1, false, self.config.limiters.clone(), classifier)?;
        let limits = &self.config.limiters;
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(
            limits.request_rate.max_keys,
            limits.request_rate.quotas.len(),
            limits.concurrent_requests.max_keys,
        ));
        let resting = ControllerParams::from_config(wu).resting();
        let explicit = self
            .admin_token
            .or_else(|| std::env::var(&self.config.admin.token_env).ok())
            .filter(|t| !t.is_empty());
        let admin_token_generated = explicit.is_none();
        let admin_token = explicit.unwrap_or_else(random_token);
        let shared = Arc::new(Shared {
            settings: ArcSwap::from_pointee(settings),
            plan: ArcSwap::from_pointee(ShedPlan::idle(resting, clock.now())),
            metrics: Metrics::new(),
            in_flight,
            runtimes,
            tier_hook: self.tier_hook,
            plan_hook: self.plan_hook,
            store,
            seed,
            instances: AtomicU64::new(0),
            admin_token,
            admin_token_generated,
            fail_open_log: LogGate::new(Duration::from_secs(10)),
            dark_log: LogGate::new(Duration::from_secs(10)),
            pending_sources: Mutex::new(None),
            actors: tokio::sync::Mutex::new(None),
            clock,
            config: self.config,
        });
        let sources = build_sources(&shared, self.custom)?;
        *shared
            .pending_sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(sources);
        let brownout = Brownout { shared };
        brownout.publish_settings();
        Ok(brownout)
    }
}

/// 32 random bytes as hex: the admin token when none is configured.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    if getrandom::fill(&mut bytes).is_err() {
        // Never fall back to a guessable token: mix several OS seeds instead.
        for chunk in bytes.chunks_mut(8) {
            chunk.copy_from_slice(&crate::rng::os_seed().to_le_bytes());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn build_sources(
    shared: &Arc<Shared>,
    mut custom: Option<Box<dyn UtilizationSource>>,
) -> Result<Vec<Box<dyn UtilizationSource>>, Error> {
    let wu = &shared.config.limiters.worker_utilization;
    let kinds = match wu.source {
        SourceKind::Max => wu.sources.clone(),
        one => vec![one],
    };
    let mut sources: Vec<Box<dyn UtilizationSource>> = Vec::new();
    for kind in kinds {
        sources.push(match kind {
            SourceKind::InFlight => {
                let weak = Arc::downgrade(shared);
                Box::new(InFlightSource::new(shared.in_flight.clone(), move || {
                    weak.upgrade().map_or(1, |s| {
                        s.settings.load().limiters.worker_utilization.capacity
                    })
                }))
            }
            SourceKind::Cpu => Box::new(CpuSource::new()?),
            SourceKind::Runtime => Box::new(RuntimeSource::new(shared.runtimes.clone())),
            SourceKind::Custom => custom.take().ok_or_else(|| {
                ConfigError::invalid(
                    "limiters.worker_utilization.source",
                    "is custom, but no custom source was registered with BrownoutBuilder::custom_source",
                )
            })?,
            SourceKind::Max => unreachable!("validation refuses max inside max"),
        });
    }
    Ok(sources)
}

/// The handle an app embeds: make middleware from it, start its actors, serve its admin API.
///
/// # Examples
/// ```no_run
/// use actix_web::{web, App, HttpServer};
/// use brownout::Brownout;
///
/// #[actix_web::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
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
    pub(crate) shared: Arc<Shared>,
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
            tier_hook: None,
            plan_hook: None,
            admin_token: None,
        }
    }

    /// Loads, validates and builds from a YAML file, with defaults for every injection.
    pub fn from_config_file(path: impl AsRef<std::path::Path>) -> Result<Self, Error> {
        Self::builder(Config::load(path)?).build()
    }

    /// Starts the sampler and controller actors on the current tokio runtime.
    /// Calling it again does nothing.
    pub fn start(&self) -> Result<(), Error> {
        tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let taken = self
            .shared
            .pending_sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(sources) = taken {
            let actors = actors::spawn(self.shared.clone(), sources);
            match self.shared.actors.try_lock() {
                Ok(mut slot) => *slot = Some(actors),
                Err(_) => unreachable!("only start and shutdown take the actors lock"),
            }
        }
        Ok(())
    }

    /// Stops the actors and waits for them. The middleware keeps working (it fails open once
    /// the last plan goes stale).
    pub async fn shutdown(&self) {
        let actors = self.shared.actors.lock().await.take();
        if let Some(actors) = actors {
            actors.stop().await;
        }
    }

    /// The actix middleware; wrap your `App` with it.
    pub fn middleware(&self) -> BrownoutMiddleware {
        BrownoutMiddleware::new(self.shared.clone())
    }

    /// Samples utilization now (outside the regular interval) and returns the plan that
    /// results; `None` if the actors are not running.
    pub async fn sample_now(&self) -> Option<ShedPlan> {
        let sampler = self.shared.actors.lock().await.as_ref()?.sampler.clone();
        let (reply, answer) = tokio::sync::oneshot::channel();
        sampler.send(SamplerMsg::SampleNow(reply)).await.ok()?;
        answer.await.ok()
    }

    /// The plan the middleware currently applies.
    pub fn plan(&self) -> ShedPlan {
        **self.shared.plan.load()
    }

    /// The live settings.
    pub fn settings(&self) -> Arc<Settings> {
        self.shared.settings.load_full()
    }

    /// The configuration this handle was built from.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Requests in progress through the middleware, per tier.
    pub fn in_flight(&self) -> PerTier<i64> {
        self.shared.in_flight.per_tier()
    }

    /// Every metric in the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let (rate_keys, concurrency_keys) = self.shared.store.tracked_keys();
        self.shared
            .metrics
            .publish_tracked_keys(rate_keys, concurrency_keys);
        self.shared.metrics.render(&self.shared.in_flight)
    }

    /// Keys tracked by the request-rate limiter (bucket and quotas) and the concurrency limiter.
    pub fn tracked_keys(&self) -> (usize, usize) {
        self.shared.store.tracked_keys()
    }

    /// Drops idle keyed state now (the evictor actor does this every `eviction_interval`).
    pub fn evict_idle(&self) {
        self.shared.evict_idle();
    }

    fn publish_settings(&self) {
        let s = self.shared.settings.load();
        self.shared
            .metrics
            .publish_settings(s.modes(), s.kill_switch, s.version);
    }
}
