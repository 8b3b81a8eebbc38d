//! The vocabulary of the configuration, below the limiters: modes, durations, route patterns,
//! the sections that the classifier, the stores and the controller read (`classifier:`,
//! `store:`, `admin:`, `limiters.deadline`, the worker-utilization shedder's bands and
//! sources), and [`ConfigError`] with the checks every section is validated by. Each limiter's
//! own block lives in its folder (`crate::limiter::<name>::settings`); the whole file,
//! `Config`, is assembled above them in `crate::config`, which re-exports all of this.

mod duration;
pub(crate) mod parse;
mod route;
mod store;
pub(crate) mod validate;
mod worker;

pub use duration::{DurationParseError, HumanDuration};
pub(crate) use route::RoutePattern;
pub use store::{AdminScope, StoreConfig, StoreKind, StoreSync};
pub use validate::ConfigError;
pub use worker::{Bands, MaxShed, Selection, SourceKind};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use validate::Valid;

/// Most `X-Forwarded-For` header lines read (the last ones: entries are taken from the end).
pub(crate) const MAX_FORWARDED_LINES: usize = 8;

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

/// How a quota counts its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaAlgorithm {
    /// Counts per aligned window; allows a burst of twice the limit across a boundary.
    FixedWindow,
    /// Weights the previous window by its unexpired fraction; no boundary burst.
    SlidingWindow,
    /// Exact: keeps the time of every event still in the window (8 bytes each, at most
    /// `limit` a key), so that no rolling window ever holds more than `limit`.
    SlidingLog,
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
    /// API keys starting with this are test-mode traffic (none by default: only the
    /// `Brownout-Test-Mode: true` header marks a request as test traffic).
    pub test_key_prefix: Option<String>,
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
            critical: Vec::new(),
            test_key_prefix: None,
            trust_forwarded_for: false,
            forwarded_for_hops: 1,
            trust_plan_header: false,
            charge_preflights: false,
        }
    }
}

/// `limiters.deadline:` — what happens to an admitted request whose app has not answered
/// after a while (its client has usually given up by then; actix-web keeps running the
/// handler, so without this it would keep counting against every in-flight limit).
///
/// # Examples
/// ```
/// use brownout::Config;
///
/// let config = Config::from_yaml_str("limiters:\n  deadline:\n    after: 30s\n    cancel: true\n")?;
/// let deadline = &config.limiters.deadline;
/// assert_eq!(deadline.after.get(), std::time::Duration::from_secs(30));
/// assert!(deadline.cancel);
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct DeadlineConfig {
    /// After this long the request stops counting: its place in the in-flight count and its
    /// limiter permits are given back (counted in `brownout_expired_requests_total`).
    pub after: HumanDuration,
    /// Also stop the handler (it is dropped: its work ends at its next await) and answer 503.
    pub cancel: bool,
}

impl Default for DeadlineConfig {
    fn default() -> Self {
        Self {
            after: HumanDuration::from_secs(60),
            cancel: false,
        }
    }
}

impl DeadlineConfig {
    pub(crate) fn validate(&self) -> Valid {
        validate::duration(
            self.after.get(),
            "limiters.deadline.after",
            (Duration::from_millis(10), Duration::from_secs(3600)),
        )
    }
}
