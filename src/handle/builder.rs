//! [`BrownoutBuilder`]: validation, injections (clock, seed, sources, hooks) and assembly.

use super::{Brownout, Error, Inner};
use crate::classify::Classifier;
use crate::classify::ClientKey;
use crate::clock::{Clock, SystemClock};
use crate::config::StoreKind;
use crate::config::{Config, ConfigError, SourceKind};
use crate::control::{
    InFlight, InFlightSource, RuntimeRegistry, RuntimeSource, ShedPlan, UtilizationSource,
};
use crate::engine::{Engine, Settings};
use crate::hook::HookRequest;
use crate::hook::Hooks;
use crate::limiter::adaptive_concurrency::AdaptiveState;
use crate::ops::restore::{restore, RestoreReport, Restored};
use crate::ops::{persist, AuditLog};
use crate::store::{Keyed, Store};
use crate::tier::Tier;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

/// Builds a [`Brownout`] from a [`Config`] and optional injections.
///
/// # Examples
/// Name the client per-user limits count against (here a header your gateway set after it
/// authenticated the caller), with a manual clock for a deterministic test:
/// ```
/// use brownout::clock::ManualClock;
/// use brownout::{Brownout, ClientKey, Config};
/// use std::sync::Arc;
///
/// let clock = Arc::new(ManualClock::default());
/// let brownout = Brownout::builder(Config::builder().rate_limit(10.0, 20).build()?)
///     .clock(clock.clone())
///     .seed(7)
///     .key_hook(|req| {
///         let customer = req.headers().get("x-customer-id")?;
///         Some(ClientKey::new(customer.as_bytes()))
///     })
///     .build()?;
/// # let _ = brownout;
/// # Ok::<(), brownout::Report>(())
/// ```
pub struct BrownoutBuilder {
    pub(super) config: Config,
    pub(super) clock: Option<Arc<dyn Clock>>,
    pub(super) seed: Option<u64>,
    pub(super) custom: Option<Box<dyn UtilizationSource>>,
    pub(super) hooks: Hooks,
    pub(super) admin_token: Option<String>,
    pub(super) store: Option<Arc<dyn Store>>,
    pub(super) config_path: Option<std::path::PathBuf>,
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
    /// open to the built-in rules. Hooks see a [`HookRequest`], from the actix middleware and
    /// from the tower layer alike.
    pub fn tier_hook(
        mut self,
        hook: impl Fn(&HookRequest<'_>) -> Option<Tier> + Send + Sync + 'static,
    ) -> Self {
        self.hooks.tier = Some(Arc::new(hook));
        self
    }

    /// Names the client that the per-user limits count a request against, for requests where
    /// `hook` returns `Some`: the customer your app has verified (from a session, a JWT's
    /// subject, an `X-Api-Key` you looked up), as a [`ClientKey`]. This is the recommended
    /// way: the built-in rule counts against the *unverified* bearer string, which a client can
    /// change at will (the per-IP ceiling, `request_rate.per_ip`, bounds that). `None` falls
    /// back to the bearer key, else the client IP. A panicking hook fails open to that rule.
    ///
    /// # Examples
    /// ```
    /// # use brownout::{Brownout, Config};
    /// #[derive(Clone)]
    /// struct Customer { id: String }   // inserted by your authentication middleware
    ///
    /// let brownout = Brownout::builder(Config::default())
    ///     .key_hook(|req| req.extensions().get::<Customer>().map(|c| c.id.as_str().into()))
    ///     .build()
    ///     .unwrap();
    /// ```
    pub fn key_hook(
        mut self,
        hook: impl Fn(&HookRequest<'_>) -> Option<ClientKey> + Send + Sync + 'static,
    ) -> Self {
        self.hooks.key = Some(Arc::new(hook));
        self
    }

    /// Names the request-rate plan of requests for which `hook` returns `Some` (e.g. from the
    /// customer record the app already loaded). A panicking hook fails open to the default plan.
    pub fn plan_hook(
        mut self,
        hook: impl Fn(&HookRequest<'_>) -> Option<Arc<str>> + Send + Sync + 'static,
    ) -> Self {
        self.hooks.plan = Some(Arc::new(hook));
        self
    }

    /// Keeps per-key limiter state in `store` instead of the in-memory tables sized from the
    /// config (a shared store, or a test double).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Names the file the configuration came from: SIGHUP (`admin.reload_on_sighup`) and
    /// [`Brownout::reload_config`] read it again. Set by [`Brownout::from_config_file`].
    pub fn config_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.config_path = Some(path.into());
        self
    }

    /// Sets the admin token directly instead of reading `admin.token_env`.
    pub fn admin_token(mut self, token: impl Into<String>) -> Self {
        self.admin_token = Some(token.into());
        self
    }

    /// Validates everything and builds the handle (actors are started by [`Brownout::start`]).
    ///
    /// # Errors
    /// [`Error::Config`] for settings that do not validate (naming the key), including an
    /// `admin.overrides_file` whose directory is missing or unwritable; [`Error::Source`] when
    /// a utilization source cannot be set up (or `custom` was chosen without one).
    pub fn build(self) -> Result<Brownout, Error> {
        self.config.validate()?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock::new()));
        let seed = self.seed.unwrap_or_else(crate::rng::os_seed);
        // Shared limits need every server to hash a client to the same key: in fleet mode the
        // key hash is seeded from the key prefix, not at random. (Without the `redis` feature
        // validation refused `store.kind: redis`.)
        let key_seed = if self.config.store.kind == StoreKind::Redis {
            crate::rng::mix(
                foldhash::quality::FixedState::with_seed(0).hash_one(&self.config.store.key_prefix),
            )
        } else {
            seed
        };
        let classifier = Classifier::new(&self.config.classifier, key_seed)
            .map_err(|m| ConfigError::invalid("classifier.critical", m))?;
        let in_flight = Arc::new(InFlight::default());
        let runtimes = Arc::new(RuntimeRegistry::default());
        let wu = &self.config.limiters.worker_utilization;
        if let Some(path) = &self.config.admin.overrides_file {
            check_writable_dir(path)?;
        }
        let now_ms = (clock.unix_origin() + clock.now()).as_millis() as u64;
        let overrides = load_overrides(&self.config, self.config_path.as_deref(), now_ms);
        let settings = Settings::new(
            overrides.version,
            overrides.kill_switch,
            overrides.limiters,
            classifier,
            self.config.admin.metrics_auth,
        )?;
        let limits = &settings.limiters;
        let buckets = crate::limiter::request_rate::BUCKETS;
        let keyed = Keyed::build(
            &self.config.store,
            (&limits.tables(), buckets),
            self.store,
            clock.clone(),
        )?;
        let resting = wu.controller().resting();
        let adaptive = Arc::new(AdaptiveState::new(f64::from(
            limits.adaptive_concurrency.initial_limit,
        )));
        let explicit = self
            .admin_token
            .or_else(|| std::env::var(&self.config.admin.token_env).ok())
            .filter(|t| !t.is_empty());
        let admin_token_generated = explicit.is_none();
        let admin_token = explicit.unwrap_or_else(random_token);
        let engine = Arc::new(Engine::new(
            settings,
            &ShedPlan::idle(resting, clock.now()),
            clock,
            in_flight,
            keyed,
            adaptive,
            (seed, key_seed),
        ));
        engine
            .metrics()
            .publish_concurrency_limit(engine.adaptive().limit(), 0, 1.0);
        let sources = build_sources(&engine, &runtimes, &self.config, self.custom)?;
        let fleet_status = Arc::new(Mutex::new(crate::ops::FleetStatus::new(&self.config)));
        let config_file = self.config_path.map(|path| crate::ops::ConfigFile {
            path,
            sections: self
                .config
                .app
                .names()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        });
        let inner = Inner {
            engine,
            fleet_status,
            config: Arc::new(self.config),
            hooks: self.hooks,
            runtimes,
            admin_token,
            admin_token_generated,
            pending_sources: Mutex::new(Some(sources)),
            pending_reverts: Mutex::new(overrides.reverts),
            actors: Mutex::new(None),
            config_file,
            audit: Arc::new(Mutex::new(AuditLog::default())),
            restored: overrides.report,
        };
        let brownout = Brownout {
            inner: Arc::new(inner),
        };
        brownout.publish_settings();
        let restored = &brownout.inner.restored;
        brownout
            .engine()
            .metrics()
            .publish_overrides_dropped(restored.dropped.len());
        Ok(brownout)
    }
}

/// The overrides file's directory must exist and take new files, or every admin change would
/// be refused later: say so at start, naming the key.
fn check_writable_dir(path: &std::path::Path) -> Result<(), ConfigError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let refuse = |why: String| {
        ConfigError::invalid("admin.overrides_file", format!("{}: {why}", path.display()))
    };
    if !dir.is_dir() {
        return Err(refuse(format!(
            "its directory {} does not exist",
            dir.display()
        )));
    }
    let probe = dir.join(format!(".brownout-probe-{}", std::process::id()));
    std::fs::File::create(&probe)
        .map_err(|e| refuse(format!("cannot create files in {}: {e}", dir.display())))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// config.yaml's limiters with `admin.overrides_file` applied over them, key by key: what no
/// longer holds is dropped, each key logged ([`crate::ops::restore`]).
fn load_overrides(config: &Config, file: Option<&std::path::Path>, now_ms: u64) -> Restored {
    let Some(path) = &config.admin.overrides_file else {
        return Restored {
            limiters: config.limiters.clone(),
            kill_switch: false,
            reverts: Vec::new(),
            version: 1,
            report: RestoreReport::default(),
        };
    };
    let restored = restore(&config.limiters, path, now_ms);
    let over = file.map_or_else(
        || "the configuration the program built".to_owned(),
        |f| f.display().to_string(),
    );
    for d in &restored.report.dropped {
        tracing::error!(
            path = %path.display(),
            key = %d.key,
            "admin overrides file: a saved change is not in force: {} {}",
            d.key,
            d.reason
        );
    }
    if restored.report.dropped.is_empty() {
        tracing::info!(path = %path.display(), "applied admin overrides over {over}");
    } else {
        let aside = restored.report.set_aside.as_ref().map_or_else(
            || "it could not be copied aside".to_owned(),
            |p| format!("the file as it was is kept at {}", p.display()),
        );
        tracing::error!(
            path = %path.display(),
            dropped = restored.report.dropped.len(),
            version = restored.version,
            "applied what holds of the admin overrides over {over}; {aside}"
        );
        // The version now in force is issued: a restart before the next change goes on
        // from it, not back to one an ETag may already hold for other settings.
        if let Err(e) = persist::save_version(path, restored.version) {
            tracing::error!(path = %path.display(), "cannot record the settings version: {e}");
        }
    }
    restored
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
    engine: &Arc<Engine>,
    runtimes: &Arc<RuntimeRegistry>,
    config: &Config,
    mut custom: Option<Box<dyn UtilizationSource>>,
) -> Result<Vec<Box<dyn UtilizationSource>>, Error> {
    let wu = &config.limiters.worker_utilization;
    let kinds = match wu.source {
        SourceKind::Max => wu.sources.clone(),
        one => vec![one],
    };
    let mut sources: Vec<Box<dyn UtilizationSource>> = Vec::new();
    for kind in kinds {
        sources.push(match kind {
            SourceKind::InFlight => {
                let weak = Arc::downgrade(engine);
                let (counts, service) = (weak.clone(), weak.clone());
                // Pinned by the operator, else learned from what the app was seen to serve.
                let source = InFlightSource::new(engine.in_flight().clone(), move || {
                    let s = weak.upgrade()?;
                    let pinned = s.settings().load().limiters.worker_utilization.capacity;
                    pinned.map(f64::from).or_else(|| s.adaptive().capacity())
                });
                Box::new(source.with_traffic(
                    move || counts.upgrade().map_or_else(Default::default, |s| s.metrics().traffic()),
                    // Each tier's service time, learned by adaptive_concurrency from the
                    // requests the app served (while it runs; else the mean time in the app).
                    move || service.upgrade().map_or([None; 4], |s| s.tier_service_times()),
                ))
            }
            #[cfg(feature = "cpu")]
            SourceKind::Cpu => Box::new(crate::control::CpuSource::new()?),
            // Refused by validation without the feature.
            #[cfg(not(feature = "cpu"))]
            SourceKind::Cpu => {
                return Err(ConfigError::invalid(
                    "limiters.worker_utilization.source",
                    "is cpu, which needs brownout's `cpu` feature",
                )
                .into())
            }
            SourceKind::Runtime => Box::new(RuntimeSource::new(runtimes.clone())),
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
