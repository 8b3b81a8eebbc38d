//! Configuration: the YAML file's shape (strictly parsed), its defaults and its validation.
//!
//! Every section rejects unknown keys, durations are human strings (`8s`), and
//! [`Config::validate`] refuses impossible settings with a message that names the key.

mod adaptive;
mod builder;
mod duration;
mod limits;
mod limits_check;
mod parse;
mod route;
mod sections;
mod store;
mod validate;
mod worker;

pub use adaptive::{AdaptiveConcurrencyConfig, DeadlineConfig};
pub use builder::ConfigBuilder;
pub use duration::{DurationParseError, HumanDuration};
pub use limits::{
    ConcurrentRequestsConfig, FleetUsageConfig, PerIpConfig, PlanConfig, QuotaAlgorithm,
    QuotaConfig, QuotaCount, QuotaKey, RequestRateConfig,
};
pub(crate) use parse::describe_json;
pub use route::RoutePattern;
pub use sections::app_section;
pub use store::{AdminScope, StoreConfig, StoreKind, StoreSync};
pub use validate::ConfigError;
pub use worker::{Bands, MaxShed, Selection, SourceKind, WorkerUtilizationConfig};

/// Most `X-Forwarded-For` header lines read (the last ones: entries are taken from the end).
pub const MAX_FORWARDED_LINES: usize = 8;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Config {
    /// The admin HTTP server.
    pub admin: AdminConfig,
    /// How requests are put into tiers and keyed.
    pub classifier: ClassifierConfig,
    /// The four limiters.
    pub limiters: LimitersConfig,
    /// Where keyed limiter state lives.
    pub store: StoreConfig,
    /// The embedding application's own sections, kept as written (see [`app_section`]).
    #[serde(skip)]
    pub(crate) app: sections::AppSections,
}

impl Config {
    /// Parses and validates YAML text. A type error, an unknown or a duplicate key names the
    /// dotted key, what was expected and where (line and column), on one line.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key (and line) of the first problem; an empty text too.
    ///
    /// # Examples
    /// ```
    /// use brownout::{Config, Mode};
    ///
    /// let config = Config::from_yaml_str("limiters:\n  request_rate:\n    mode: dark\n    rate: 50\n")?;
    /// assert_eq!(config.limiters.request_rate.mode, Mode::Dark);
    ///
    /// let err = Config::from_yaml_str("limiters:\n  request_rate:\n    rate: fast\n").unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "limiters.request_rate.rate must be a number, not \"fast\" (line 3, column 11)"
    /// );
    /// # Ok::<(), brownout::Report>(())
    /// ```
    pub fn from_yaml_str(text: &str) -> Result<Self, ConfigError> {
        Self::from_yaml_str_with_sections(text, &[])
    }

    /// As [`from_yaml_str`](Self::from_yaml_str), where the file also holds the embedding
    /// program's own top-level `sections` (the demo's `demo:`): brownout keeps them as written
    /// and reads nothing in them; the program reads its own with [`app_section`]. Any other
    /// unknown top-level key is still refused as a typo.
    ///
    /// # Errors
    /// As for [`from_yaml_str`](Self::from_yaml_str).
    pub fn from_yaml_str_with_sections(text: &str, sections: &[&str]) -> Result<Self, ConfigError> {
        let config = sections::yaml(text, sections)?;
        config.validate().map_err(|e| e.located(text))?;
        Ok(config)
    }

    /// Reads, parses and validates a YAML file.
    ///
    /// # Errors
    /// As for [`from_yaml_str`](Self::from_yaml_str), with the file's name in front; or the
    /// file cannot be read.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::load_with_sections(path, &[])
    }

    /// As [`load`](Self::load), with the program's own top-level `sections` (see
    /// [`from_yaml_str_with_sections`](Self::from_yaml_str_with_sections)). A reload of the
    /// file (SIGHUP, [`Brownout::reload_config`](crate::Brownout::reload_config)) reads it
    /// with the same sections, and refuses a change to one of them by its key.
    ///
    /// # Errors
    /// As for [`load`](Self::load).
    pub fn load_with_sections(
        path: impl AsRef<Path>,
        sections: &[&str],
    ) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml_str_with_sections(&text, sections).map_err(|e| e.in_file(path))
    }
}

/// What a limiter does with a request it would reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Reject it.
    #[default]
    Enforce,
    /// Count and log it as `dark_rejected`, but let it through (dark launch).
    Dark,
    /// Do not evaluate the limiter at all (kill switch).
    Off,
}

impl Mode {
    /// Every mode, in label order.
    pub const ALL: [Mode; 3] = [Mode::Enforce, Mode::Dark, Mode::Off];

    /// The label value used in metrics and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Dark => "dark",
            Mode::Off => "off",
        }
    }
}

/// `admin:` — the admin server.
///
/// # Examples
/// ```
/// use brownout::Config;
///
/// let config = Config::from_yaml_str(
///     "admin:\n  bind: 127.0.0.1:9191\n  token_env: MY_ADMIN_TOKEN\n  metrics_auth: true\n",
/// )?;
/// assert_eq!(config.admin.bind, "127.0.0.1:9191");
/// assert_eq!(config.admin.token_env, "MY_ADMIN_TOKEN");
/// assert!(config.admin.metrics_auth);
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct AdminConfig {
    /// Listen address, e.g. `127.0.0.1:9090`.
    pub bind: String,
    /// The environment variable holding the bearer token.
    pub token_env: String,
    /// Whether `GET /metrics` requires the token too.
    pub metrics_auth: bool,
    /// Where admin changes are persisted (unset: they last until restart).
    pub overrides_file: Option<PathBuf>,
    /// Where a generated admin token is written (mode 0600) instead of being printed to stderr.
    pub token_file: Option<PathBuf>,
    /// Reload the configuration file on SIGHUP (installed by `Brownout::start`).
    pub reload_on_sighup: bool,
    /// How long an admin request's body may take to arrive.
    pub body_timeout: HumanDuration,
    /// Where admin changes apply: `fleet` (every instance sharing the Redis store; the default
    /// with `store.kind: redis`) or `local` (this instance only; the default otherwise).
    pub scope: Option<AdminScope>,
    /// This instance's name in the audit log and in fleet settings (default: host name and
    /// process id).
    pub instance: Option<String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:9090".into(),
            token_env: "BROWNOUT_ADMIN_TOKEN".into(),
            metrics_auth: false,
            overrides_file: None,
            token_file: None,
            reload_on_sighup: true,
            body_timeout: HumanDuration::from_secs(10),
            scope: None,
            instance: None,
        }
    }
}

/// `classifier:` — tiers and keys.
///
/// # Examples
/// ```
/// use brownout::Config;
///
/// let config = Config::from_yaml_str(
///     "classifier:
///   critical:
///     - POST /v1/charges
///     - \"* /v1/refunds/{id}\"
///   trust_forwarded_for: true
///   forwarded_for_hops: 2
/// ",
/// )?;
/// let c = &config.classifier;
/// assert_eq!(c.critical, ["POST /v1/charges", "* /v1/refunds/{id}"]);
/// assert_eq!((c.trust_forwarded_for, c.forwarded_for_hops), (true, 2));
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ClassifierConfig {
    /// Route patterns (`"METHOD /path/{param}"`, method `*` for any) of the critical tier.
    pub critical: Vec<String>,
    /// API keys starting with this are test-mode traffic.
    pub test_key_prefix: String,
    /// Take the client address from `X-Forwarded-For` (only behind a proxy you trust).
    pub trust_forwarded_for: bool,
    /// How many trusted proxies append to `X-Forwarded-For`: the client is this entry from the
    /// end (1: the last one, added by the nearest proxy).
    pub forwarded_for_hops: u32,
    /// Take the request-rate plan from the `Brownout-Plan` header (only if your app sets it).
    pub trust_plan_header: bool,
    /// Count `OPTIONS` requests (CORS preflights, which a browser sends on its own) against
    /// the per-client limiters (request_rate, concurrent_requests) like any other request.
    pub charge_preflights: bool,
}

impl Default for ClassifierConfig {
    fn default() -> Self {
        Self {
            critical: vec!["POST /v1/charges".into()],
            test_key_prefix: "sk_test_".into(),
            trust_forwarded_for: false,
            forwarded_for_hops: 1,
            trust_plan_header: false,
            charge_preflights: false,
        }
    }
}

/// The one list of limiters, `Variant = index, name: Settings;` in the order of their tables,
/// metrics and `limiters:` blocks: `name` is the metrics' label, the admin API's name and the
/// key of its block, whose type `Settings` (with a `mode`) is also the limiter's unit (it
/// implements `crate::limiter::Limiter` in the limiter's own module). Everything that goes
/// over every limiter is generated from it: here [`LimitersConfig`] and its validation, in
/// `crate::limiter` the limiters' modules, `LimiterName` and its dispatch. How to add a limiter:
/// docs/ARCHITECTURE.md, "How to add a limiter".
macro_rules! limiter_list {
    ($then:ident) => {
        $then! {
            /// Per-key token bucket with weighted costs.
            RequestRate = 0, request_rate: $crate::config::RequestRateConfig;
            /// Per-key in-flight cap.
            ConcurrentRequests = 1, concurrent_requests: $crate::config::ConcurrentRequestsConfig;
            /// Capacity reserved for critical traffic.
            FleetUsage = 2, fleet_usage: $crate::config::FleetUsageConfig;
            /// The fast guard: a learned limit on non-critical requests in flight.
            AdaptiveConcurrency = 3, adaptive_concurrency: $crate::config::AdaptiveConcurrencyConfig;
            /// The derivative controller that sheds by tier.
            WorkerUtilization = 4, worker_utilization: $crate::config::WorkerUtilizationConfig;
        }
    };
}
pub(crate) use limiter_list;

/// `limiters:`, one block per limiter in the list's order, then `deadline:`.
macro_rules! limiters_config {
    ($($(#[$doc:meta])* $variant:ident = $index:literal, $name:ident: $settings:ty;)*) => {
        /// `limiters:` — one block per limiter, checked in this order.
        ///
        /// # Examples
        /// ```
        /// use brownout::{Config, Mode};
        ///
        /// // Every limiter at its default: the per-client ones off, the overload protection on.
        /// let limiters = Config::default().limiters;
        /// assert_eq!(limiters.request_rate.mode, Mode::Off);
        /// assert_eq!(limiters.worker_utilization.mode, Mode::Enforce);
        /// limiters.validate()?;
        /// # Ok::<(), brownout::Report>(())
        /// ```
        #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        #[non_exhaustive]
        pub struct LimitersConfig {
            $($(#[$doc])* pub $name: $settings,)*
            /// When an admitted request that is still running stops counting.
            pub deadline: DeadlineConfig,
        }

        impl LimitersConfig {
            /// Checks every limiter block, in order, then the deadline (also used for live
            /// updates).
            pub fn validate(&self) -> Result<(), ConfigError> {
                $(self.$name.validate()?;)*
                self.deadline.validate()
            }
        }
    };
}
limiter_list!(limiters_config);
