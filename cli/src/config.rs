//! The configuration as the `brownout` binary reads it: brownout's own sections (the library's
//! [`Config`], config.yaml) and the demo's `demo:` section, which the library never reads. The
//! shipped config.yaml holds the library's sections only, so that an app that embeds brownout
//! can use it as it is; the demo's section is in demo.yaml beside it (a `demo:` section in the
//! file itself wins, which is how `bench overload` writes one file per arm).

use brownout::config::{app_section, ConfigError, HumanDuration};
use brownout::Config;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::Path;

/// The program's own top-level sections of config.yaml.
pub const SECTIONS: &[&str] = &["demo"];

/// The file beside config.yaml that holds the demo's section.
pub const DEMO_FILE: &str = "demo.yaml";

/// The whole file: brownout's sections and the demo's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CliConfig {
    /// What the library reads (every section but `demo:`).
    pub brownout: Config,
    /// `demo:`.
    pub demo: DemoConfig,
}

/// The file as the demo reads it: brownout's sections and `demo:` side by side (what `bench
/// overload` writes for each arm's process).
impl Serialize for CliConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Whole<'a> {
            #[serde(flatten)]
            brownout: &'a Config,
            demo: &'a DemoConfig,
        }
        Whole {
            brownout: &self.brownout,
            demo: &self.demo,
        }
        .serialize(s)
    }
}

impl CliConfig {
    /// Parses and validates YAML text: both parts, with the library's messages (dotted key,
    /// what was expected, line).
    ///
    /// # Errors
    /// The first problem, naming its key.
    pub fn from_yaml_str(text: &str) -> Result<Self, ConfigError> {
        Ok(Self {
            brownout: Config::from_yaml_str_with_sections(text, SECTIONS)?,
            demo: app_section(text, "demo", DemoConfig::validate)?,
        })
    }

    /// Reads, parses and validates a file.
    ///
    /// # Errors
    /// As for [`from_yaml_str`](Self::from_yaml_str), with the file's name in front; or the
    /// file cannot be read.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        // Read through the library so that the file's name is added as it adds it.
        let brownout = Config::load_with_sections(path, SECTIONS)?;
        let beside = path.with_file_name(DEMO_FILE);
        let (text, from) = if text.lines().any(|l| l.starts_with("demo:")) || !beside.exists() {
            (text, path.to_owned())
        } else {
            let demo = std::fs::read_to_string(&beside).map_err(|source| ConfigError::Io {
                path: beside.clone(),
                source,
            })?;
            (demo, beside)
        };
        let demo =
            app_section(&text, "demo", DemoConfig::validate).map_err(|e| ConfigError::InFile {
                path: from,
                inner: Box::new(e),
            })?;
        Ok(Self { brownout, demo })
    }

    /// What the demo runs with no file: the library's defaults and the demo's own classifier
    /// (config.yaml's `# demo` lines): `POST /v1/charges` is critical, `sk_test_` keys are
    /// test-mode. The library names neither.
    pub fn demo() -> Self {
        let mut c = Self::default();
        c.brownout.classifier.critical = vec![format!("POST {}", Route::Charges.request().1)];
        c.brownout.classifier.test_key_prefix = Some(DEMO_TEST_KEY_PREFIX.into());
        c
    }
}

/// The demo's test-mode API keys start with this (as Stripe's do).
pub const DEMO_TEST_KEY_PREFIX: &str = "sk_test_";

/// `demo:` — the demo app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DemoConfig {
    /// Listen address of the demo app.
    pub bind: String,
    /// Size of the simulated worker pool.
    pub workers: u32,
    /// How long each request holds a worker.
    pub service_time: HumanDuration,
    /// Per route, how long a request holds a worker (instead of `service_time`): an app
    /// whose routes cost different amounts, e.g. `{get_items: 10ms, post_items: 100ms,
    /// charges: 200ms}`, and optionally `get_item` (`GET /v1/items/{id}`, a cache hit) and
    /// `reports` (`GET /v1/reports`), which take `get_items`'s time when unset. `GET
    /// /healthz` is answered at once, without a worker; any other path is answered 404 at
    /// once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route_times: Option<RouteTimes>,
    /// How much each request's time spreads around its route's: the σ of the log-normal it
    /// is drawn from, its mean kept (0, the default: every request takes the same time; 0.5:
    /// as a real route, one request in twenty taking twice the mean or more). 0 to 2.
    pub spread: f64,
    /// What a request does with its worker: `sleep` for `service_time` (an I/O-bound app:
    /// `workers` is its capacity), or `cpu`: burn `service_time` of CPU time on a thread of
    /// its own (a CPU-bound app: set `workers` to the cores the server is given; its capacity
    /// is what those cores do, less what HTTP and brownout take).
    pub work: DemoWork,
    /// The web framework the demo's routes are served with: `actix` (the default: brownout's
    /// middleware) or `axum` (brownout's tower layer, on a multi-threaded tokio runtime of as
    /// many threads as actix has workers). The same routes, worker pool and answers.
    pub framework: DemoFramework,
    /// Another crate's adaptive concurrency limiter in front of the demo's routes, for the
    /// overload scorecard's comparison arm (brownout's own limiters are set apart).
    pub alternative_limiter: AlternativeLimiter,
    /// How the overload scorecard's capacity drop (SIGUSR1, until SIGUSR2) halves the
    /// capacity: `slower` (every request takes twice as long) or `fewer` (half the workers).
    pub capacity_drop: CapacityDrop,
    /// A cold start: for this long after the app's first request, every request takes
    /// [`COLD_SLOWDOWN`] times its time (caches and pools still filling, code not yet hot).
    /// 0, the default: none.
    pub cold_start: HumanDuration,
}

/// How many times slower than its time a request is during `demo.cold_start`.
pub const COLD_SLOWDOWN: u32 = 3;

/// The demo's routes that hold a worker, in [`DemoConfig::times`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /v1/items`: a read.
    GetItems = 0,
    /// `POST /v1/items`.
    PostItems = 1,
    /// `POST /v1/charges`: the critical route.
    Charges = 2,
    /// `GET /v1/items/{id}`: a cache hit.
    GetItem = 3,
    /// `GET /v1/reports`: a slow report.
    Reports = 4,
}

impl Route {
    /// Every route, in [`DemoConfig::times`] order.
    pub const ALL: [Route; 5] = [
        Route::GetItems,
        Route::PostItems,
        Route::Charges,
        Route::GetItem,
        Route::Reports,
    ];

    /// Its method and a path a client sends to it.
    pub fn request(self) -> (&'static str, &'static str) {
        match self {
            Route::GetItems => ("GET", "/v1/items"),
            Route::PostItems => ("POST", "/v1/items"),
            Route::Charges => ("POST", "/v1/charges"),
            Route::GetItem => ("GET", "/v1/items/item_1"),
            Route::Reports => ("GET", "/v1/reports"),
        }
    }
}

/// `demo.capacity_drop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityDrop {
    /// Every request takes twice as long.
    #[default]
    Slower,
    /// Half the workers are taken away.
    Fewer,
}

/// `demo.route_times`: how long each demo route holds a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteTimes {
    /// `GET /v1/items`.
    pub get_items: HumanDuration,
    /// `POST /v1/items`.
    pub post_items: HumanDuration,
    /// `POST /v1/charges`.
    pub charges: HumanDuration,
    /// `GET /v1/items/{id}` (unset: `get_items`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get_item: Option<HumanDuration>,
    /// `GET /v1/reports` (unset: `get_items`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reports: Option<HumanDuration>,
}

impl DemoConfig {
    /// How long each route ([`Route::ALL`] order) holds a worker.
    pub fn times(&self) -> [std::time::Duration; 5] {
        match self.route_times {
            Some(r) => {
                let get = r.get_items.get();
                [
                    get,
                    r.post_items.get(),
                    r.charges.get(),
                    r.get_item.map_or(get, HumanDuration::get),
                    r.reports.map_or(get, HumanDuration::get),
                ]
            }
            None => [self.service_time.get(); 5],
        }
    }

    /// Refuses what the demo cannot run with, naming the key.
    ///
    /// # Errors
    /// The first problem.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.bind.parse::<SocketAddr>().is_err() {
            return Err(ConfigError::invalid(
                "demo.bind",
                format!(
                    "must be an IP address and port like 127.0.0.1:9090 (got {:?})",
                    self.bind
                ),
            ));
        }
        if self.workers < 1 {
            return Err(ConfigError::invalid("demo.workers", "must be at least 1"));
        }
        if !(self.spread.is_finite() && (0.0..=2.0).contains(&self.spread)) {
            return Err(ConfigError::invalid(
                "demo.spread",
                format!("must be between 0 and 2 (got {})", self.spread),
            ));
        }
        if self.framework == DemoFramework::Axum
            && self.alternative_limiter != AlternativeLimiter::Off
        {
            return Err(ConfigError::invalid(
                "demo.alternative_limiter",
                "is an actix middleware: set it off with framework: axum",
            ));
        }
        if !cfg!(feature = "tools") && self.alternative_limiter != AlternativeLimiter::Off {
            return Err(ConfigError::invalid(
                "demo.alternative_limiter",
                "needs the brownout binary built with the `tools` feature (cargo run --release \
                 --features tools), or off",
            ));
        }
        Ok(())
    }
}

/// `demo.work:` — how a demo request spends its service time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DemoWork {
    /// Waits (the default): a slot held, no CPU used.
    #[default]
    Sleep,
    /// Spins until its thread has used `service_time` of CPU (Linux: read from
    /// `/proc/thread-self/schedstat`), so a contended core stretches it as it would a real
    /// CPU-bound handler.
    Cpu,
}

/// `demo.framework:` — what serves the demo's routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DemoFramework {
    /// actix-web, behind brownout's middleware (the default).
    #[default]
    Actix,
    /// axum, behind brownout's tower layer (inside the router: routes learned by their
    /// matched path).
    Axum,
}

/// `demo.alternative_limiter:` — which of the congestion-limiter crate's algorithms guards
/// the demo, as a fail-fast limit on requests in flight (503 when it is full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlternativeLimiter {
    /// None (the default).
    #[default]
    Off,
    /// TCP Vegas: the queue estimated from latency over its minimum.
    Vegas,
    /// A delay gradient between short- and long-term latency.
    Gradient,
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".into(),
            workers: 8,
            service_time: HumanDuration::from_millis(50),
            route_times: None,
            spread: 0.0,
            work: DemoWork::Sleep,
            framework: DemoFramework::Actix,
            alternative_limiter: AlternativeLimiter::Off,
            capacity_drop: CapacityDrop::Slower,
            cold_start: HumanDuration::from_millis(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_section_is_read_beside_brownouts_with_the_same_messages() {
        let text = "demo:\n  workers: 2\nlimiters:\n  request_rate:\n    rate: 7\n";
        let c = CliConfig::from_yaml_str(text).unwrap();
        assert_eq!(
            (c.demo.workers, c.brownout.limiters.request_rate.rate),
            (2, 7.0)
        );
        let e = CliConfig::from_yaml_str("demo:\n  workers: -1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "demo.workers must be a whole number (0 to 4294967295), not \"-1\" (line 2, column 12)"
        );
        let e = CliConfig::from_yaml_str("{}\n").map(|c| c.demo).unwrap();
        assert_eq!(e, DemoConfig::default());
        let e = CliConfig::from_yaml_str("demo:\n  workers: 0\n").unwrap_err();
        assert_eq!(e.to_string(), "demo.workers must be at least 1 (line 2)");
        let e = CliConfig::from_yaml_str("demo:\n  spread: 3\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "demo.spread must be between 0 and 2 (got 3) (line 2)"
        );
        let e = CliConfig::from_yaml_str("demo:\n  bind: nowhere\n").unwrap_err();
        assert_eq!(e.key(), Some("demo.bind"));
        let e = CliConfig::from_yaml_str("demoo:\n  bind: x\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "demoo is not a known key; did you mean demo? (line 1, column 1)"
        );
    }
}
