//! Validation of a parsed [`Config`]: impossible settings are refused with the key's name.

use super::{Config, SourceKind, WorkerUtilizationConfig};
use super::{RoutePattern, MAX_FORWARDED_LINES};
use crate::tier::Tier;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The text is not valid YAML of the expected shape (unknown keys land here).
    #[error("{0}")]
    Parse(String),
    /// A value is out of range or inconsistent with another.
    #[error("{key} {message}")]
    Invalid {
        /// The dotted path of the offending key, e.g. `limiters.worker_utilization.start_of_bad`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// An error of the file at `path`.
    #[error("{path}: {inner}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// The error.
        inner: Box<ConfigError>,
    },
}

impl ConfigError {
    /// Adds where `key` is written in `text` (the YAML it came from) to an error found after
    /// parsing, such as a value out of range; a parse error says where already, and a key the
    /// file leaves at its default has no line.
    pub(crate) fn located(self, text: &str) -> Self {
        match self {
            ConfigError::Invalid { key, message } if !message.contains("(line ") => {
                let message = match super::parse::line_of(text, &key) {
                    Some(line) => format!("{message} (line {line})"),
                    None => message,
                };
                ConfigError::Invalid { key, message }
            }
            other => other,
        }
    }

    pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }

    pub(crate) fn in_file(self, path: &Path) -> Self {
        match self {
            e @ ConfigError::Io { .. } => e,
            e => ConfigError::InFile {
                path: path.to_owned(),
                inner: Box::new(e),
            },
        }
    }

    /// The dotted key this error is about, if it is about one key.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::InFile { inner, .. } => inner.key(),
            _ => None,
        }
    }
}

pub(super) type Check = Result<(), ConfigError>;

pub(super) fn ensure(ok: bool, key: &str, message: impl Into<String>) -> Check {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(key, message))
    }
}

pub(super) fn ratio(value: f64, key: &str) -> Check {
    ensure(
        value.is_finite() && (0.0..=1.0).contains(&value),
        key,
        format!("must be between 0 and 1 (got {value})"),
    )
}

fn address(value: &str, key: &str) -> Check {
    ensure(
        value.parse::<SocketAddr>().is_ok(),
        key,
        format!("must be an IP address and port like 127.0.0.1:9090 (got {value:?})"),
    )
}

impl Config {
    /// Checks every setting; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        address(&self.admin.bind, "admin.bind")?;
        ensure(
            !self.admin.token_env.is_empty(),
            "admin.token_env",
            "must name an environment variable",
        )?;
        let body_timeout = self.admin.body_timeout.get();
        ensure(
            body_timeout >= std::time::Duration::from_millis(10)
                && body_timeout <= std::time::Duration::from_secs(300),
            "admin.body_timeout",
            format!("must be between 10ms and 5m (got {body_timeout:?})"),
        )?;
        for (i, route) in self.classifier.critical.iter().enumerate() {
            RoutePattern::parse(route)
                .map_err(|m| ConfigError::invalid(format!("classifier.critical[{i}]"), m))?;
        }
        ensure(
            (1..=MAX_FORWARDED_LINES as u32).contains(&self.classifier.forwarded_for_hops),
            "classifier.forwarded_for_hops",
            format!(
                "must be between 1 and {MAX_FORWARDED_LINES} (got {})",
                self.classifier.forwarded_for_hops
            ),
        )?;
        ensure(
            !self.classifier.test_key_prefix.is_empty(),
            "classifier.test_key_prefix",
            "must not be empty (every key would be a test key)",
        )?;
        self.limiters.validate()?;
        self.validate_store()?;
        address(&self.demo.bind, "demo.bind")?;
        ensure(self.demo.workers >= 1, "demo.workers", "must be at least 1")
    }
}

const WU: &str = "limiters.worker_utilization";

/// Longest `sample_interval`: the controller moves once per interval.
pub(super) const MAX_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

impl super::LimitersConfig {
    /// Checks every limiter block (also used for live updates).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.request_rate.validate()?;
        self.concurrent_requests.validate()?;
        self.fleet_usage.validate()?;
        self.adaptive_concurrency.validate()?;
        self.deadline.validate()?;
        validate_worker_utilization(&self.worker_utilization)
    }
}

/// Checks the worker-utilization block.
pub(crate) fn validate_worker_utilization(w: &WorkerUtilizationConfig) -> Check {
    let key = |k: &str| format!("{WU}.{k}");
    ensure(
        w.end_of_good.is_finite() && w.end_of_good > 0.0 && w.end_of_good < 1.0,
        &key("end_of_good"),
        format!(
            "must be greater than 0 and less than 1 (got {})",
            w.end_of_good
        ),
    )?;
    ensure(
        w.start_of_bad.is_finite() && w.start_of_bad > w.end_of_good,
        &key("start_of_bad"),
        format!(
            "must be greater than end_of_good ({} is not greater than {})",
            w.start_of_bad, w.end_of_good
        ),
    )?;
    ensure(
        w.start_of_bad < 1.0,
        &key("start_of_bad"),
        format!("must be less than 1 (got {})", w.start_of_bad),
    )?;
    ensure(
        w.seconds_before_shedding.is_finite() && w.seconds_before_shedding >= 0.0,
        &key("seconds_before_shedding"),
        "must be zero or more",
    )?;
    ensure(
        w.seconds_to_shed_all.is_finite() && w.seconds_to_shed_all > 0.0,
        &key("seconds_to_shed_all"),
        "must be greater than zero",
    )?;
    let interval = w.sample_interval.get();
    ensure(
        interval.as_millis() >= 1 && interval <= MAX_SAMPLE_INTERVAL,
        &key("sample_interval"),
        format!("must be between 1ms and 5m (got {interval:?}): the controller only moves once per interval"),
    )?;
    ensure(w.capacity >= 1, &key("capacity"), "must be at least 1")?;
    ensure(
        !w.cohort_rotation.get().is_zero(),
        &key("cohort_rotation"),
        "must be greater than zero",
    )?;
    if let Some(r) = w.retry_after {
        ensure(
            !r.get().is_zero(),
            &key("retry_after"),
            "must be at least 1s",
        )?;
    }
    for tier in Tier::ALL {
        ratio(w.max_shed.get(tier), &key(&format!("max_shed.{tier}")))?;
    }
    validate_sources(w)?;
    validate_bands(w)
}

fn validate_sources(w: &WorkerUtilizationConfig) -> Check {
    // The cpu source reads the process's CPU time through sysinfo: only with the feature.
    if !cfg!(feature = "cpu") {
        let needs = "is cpu, which needs brownout's `cpu` feature: add features = [\"cpu\"] to \
                     brownout's line in Cargo.toml, or pick another source";
        ensure(w.source != SourceKind::Cpu, &format!("{WU}.source"), needs)?;
        let listed = w.source == SourceKind::Max && w.sources.contains(&SourceKind::Cpu);
        let needs = needs.replacen("is cpu", "lists cpu", 1);
        ensure(!listed, &format!("{WU}.sources"), needs)?;
    }
    let key = format!("{WU}.sources");
    if w.source == SourceKind::Max {
        ensure(
            !w.sources.is_empty(),
            &key,
            "must list at least one source when source is max",
        )?;
        ensure(
            !w.sources.contains(&SourceKind::Max),
            &key,
            "cannot contain max",
        )?;
    }
    Ok(())
}

fn validate_bands(w: &WorkerUtilizationConfig) -> Check {
    let b = &w.bands;
    let key = |k: &str| format!("{WU}.bands.{k}");
    const EPS: f64 = 1e-9;
    let ordered = [("test", b.test), ("get", b.get), ("post", b.post)];
    let mut expected_start = 0.0;
    for (name, [start, end]) in ordered {
        ensure(
            start.is_finite() && end.is_finite() && start < end,
            &key(name),
            format!("must be [start, end] with start < end (got [{start}, {end}])"),
        )?;
        ensure(
            (start - expected_start).abs() < EPS,
            &key(name),
            format!(
                "must start where the previous band ends ({expected_start}); bands must cover [0, 1] in order test, get, post"
            ),
        )?;
        expected_start = end;
    }
    ensure(
        (expected_start - 1.0).abs() < EPS,
        &key("post"),
        "must end at 1; bands must cover [0, 1] in order test, get, post",
    )?;
    match b.critical {
        Some([start, end]) => ensure(
            start.is_finite() && end.is_finite() && 0.0 <= start && start < end && end <= 1.0,
            &key("critical"),
            format!("must be within [0, 1] with start < end (got [{start}, {end}])"),
        ),
        None => ensure(
            !w.shed_critical,
            &key("critical"),
            "is required when shed_critical is true",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(yaml: &str) -> String {
        Config::from_yaml_str(yaml).unwrap_err().to_string()
    }

    #[test]
    fn a_range_error_says_on_which_line_the_key_is() {
        let e = refused("# thresholds\nlimiters:\n  worker_utilization:\n    mode: dark\n    start_of_bad: 1.5\n");
        assert!(
            e.starts_with("limiters.worker_utilization.start_of_bad must be")
                && e.ends_with("(line 5)"),
            "{e}"
        );
        // A key left at its default is not in the file: no line.
        let e = refused("limiters:\n  worker_utilization:\n    end_of_good: 0.9\n");
        assert!(!e.contains("(line"), "{e}");
    }

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
        Config::from_yaml_str("{}").unwrap();
    }

    #[test]
    fn bad_threshold_order_names_the_key() {
        let e = refused(
            "limiters:\n  worker_utilization:\n    end_of_good: 0.9\n    start_of_bad: 0.8\n",
        );
        assert!(
            e.starts_with(
                "limiters.worker_utilization.start_of_bad must be greater than end_of_good"
            ),
            "{e}"
        );
    }

    #[test]
    fn adaptive_concurrency_settings_name_their_key() {
        let e = refused("limiters:\n  adaptive_concurrency:\n    tier_hold: 2m\n");
        assert!(
            e.starts_with("limiters.adaptive_concurrency.tier_hold must be at most 60s"),
            "{e}"
        );
        let e = refused("limiters:\n  adaptive_concurrency:\n    test_share: 0.95\n");
        assert!(
            e.starts_with("limiters.adaptive_concurrency.test_share must not exceed get_share"),
            "{e}"
        );
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = refused("limiters:\n  worker_utilization:\n    start_of_badd: 0.8\n");
        assert!(e.contains("start_of_badd"), "{e}");
        let e = refused("nonsense: 1\n");
        assert!(e.contains("nonsense"), "{e}");
    }

    #[test]
    fn bad_duration_is_an_error() {
        let e = refused("limiters:\n  worker_utilization:\n    sample_interval: 8\n");
        assert!(e.contains("duration"), "{e}");
        let e = refused("limiters:\n  worker_utilization:\n    sample_interval: 8 fortnights\n");
        assert!(e.contains("not a duration"), "{e}");
    }

    #[test]
    fn bands_must_cover_zero_to_one_in_order() {
        let e = refused("limiters:\n  worker_utilization:\n    bands:\n      test: [0.0, 0.5]\n      get: [0.4, 0.7]\n      post: [0.7, 1.0]\n");
        assert!(
            e.starts_with("limiters.worker_utilization.bands.get"),
            "{e}"
        );
        let e = refused("limiters:\n  worker_utilization:\n    bands:\n      test: [0.0, 0.3]\n      get: [0.3, 0.6]\n      post: [0.6, 0.9]\n");
        assert!(
            e.starts_with("limiters.worker_utilization.bands.post must end at 1"),
            "{e}"
        );
    }

    #[test]
    fn shed_critical_needs_a_band() {
        let e = refused("limiters:\n  worker_utilization:\n    shed_critical: true\n");
        assert!(
            e.starts_with("limiters.worker_utilization.bands.critical is required"),
            "{e}"
        );
    }

    #[test]
    #[cfg(not(feature = "cpu"))]
    fn without_the_cpu_feature_the_cpu_source_is_refused_by_name() {
        let e = refused("limiters:\n  worker_utilization:\n    source: cpu\n");
        assert!(
            e.starts_with("limiters.worker_utilization.source is cpu, which needs brownout's `cpu` feature: add features = [\"cpu\"]"),
            "{e}"
        );
        let e = refused(
            "limiters:\n  worker_utilization:\n    source: max\n    sources: [in_flight, cpu]\n",
        );
        assert!(
            e.starts_with("limiters.worker_utilization.sources lists cpu, which needs"),
            "{e}"
        );
    }

    #[test]
    #[cfg(feature = "cpu")]
    fn with_the_cpu_feature_the_cpu_source_is_accepted() {
        let yaml =
            "limiters:\n  worker_utilization:\n    source: max\n    sources: [in_flight, cpu]\n";
        Config::from_yaml_str(yaml).unwrap();
    }

    #[test]
    fn max_source_needs_a_list_and_ratios_are_bounded() {
        let e = refused("limiters:\n  worker_utilization:\n    source: max\n");
        assert!(e.starts_with("limiters.worker_utilization.sources"), "{e}");
        let e = refused("limiters:\n  worker_utilization:\n    max_shed:\n      get: 1.5\n");
        assert!(
            e.starts_with("limiters.worker_utilization.max_shed.get"),
            "{e}"
        );
    }

    #[test]
    fn bad_route_and_address_name_the_key() {
        let e = refused("classifier:\n  critical: [\"charges\"]\n");
        assert!(e.starts_with("classifier.critical[0]"), "{e}");
        let e = refused("admin:\n  bind: localhost\n");
        assert!(e.starts_with("admin.bind"), "{e}");
    }

    #[test]
    fn redis_store_settings_are_checked() {
        let ok = "store:\n  kind: redis\n  url: redis://127.0.0.1:6379/\n";
        Config::from_yaml_str(ok).unwrap().validate().unwrap();
        let e = refused("store:\n  kind: redis\n");
        assert!(e.starts_with("store.url or store.nodes"), "{e}");
        let cluster = "store:\n  kind: redis\n  nodes: [\"redis://127.0.0.1:7000\"]\n";
        Config::from_yaml_str(cluster).unwrap();
        let e = refused("store:\n  kind: redis\n  url: rediss://127.0.0.1/\n");
        assert!(e.starts_with("store.url must be a redis://"), "{e}");
        let e = refused("store:\n  kind: redis\n  nodes: [\"127.0.0.1:7000\"]\n");
        assert!(e.starts_with("store.nodes must be a redis://"), "{e}");
        let both = "store:\n  kind: redis\n  url: redis://a/\n  nodes: [\"redis://b\"]\n";
        assert!(refused(both).starts_with("store.url or store.nodes"));
        let e = refused("store:\n  timeout: 2s\n");
        assert!(e.starts_with("store.timeout"), "{e}");
        let e = refused("store:\n  permit_ttl: 0s\n");
        assert!(e.starts_with("store.permit_ttl"), "{e}");
    }

    #[test]
    fn the_admin_scope_follows_the_store_and_is_refused_by_name() {
        let memory = Config::from_yaml_str("{}").unwrap();
        assert_eq!(memory.admin_scope(), crate::config::AdminScope::Local);
        let redis =
            Config::from_yaml_str("store:\n  kind: redis\n  url: redis://127.0.0.1:6379/\n")
                .unwrap();
        assert_eq!(redis.admin_scope(), crate::config::AdminScope::Fleet);
        let e = refused("admin:\n  scope: fleet\n");
        assert!(e.starts_with("admin.scope"), "{e}");
        let e = refused("admin:\n  instance: \"\"\n");
        assert!(e.starts_with("admin.instance"), "{e}");
        let e = refused("store:\n  sync: local_first\n");
        assert!(e.starts_with("store.sync"), "{e}");
        let e = refused("store:\n  sync_interval: 1ms\n");
        assert!(e.starts_with("store.sync_interval"), "{e}");
        let e = refused("admin:\n  scope: everywhere\n");
        assert!(e.contains("admin.scope"), "{e}");
    }
}

#[cfg(test)]
mod shipped {
    use super::*;

    #[test]
    fn the_shipped_config_yaml_is_valid_and_documents_the_defaults() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config.yaml");
        let c = Config::load(path).unwrap();
        let d = Config::default();
        // The code keeps Stripe's thresholds and interval; the demo tunes its own, and says
        // so on each line with the default beside it.
        let wu = &d.limiters.worker_utilization;
        assert_eq!((wu.end_of_good, wu.start_of_bad), (0.7, 0.8));
        assert_eq!(wu.sample_interval.get(), std::time::Duration::from_secs(8));
        let text = std::fs::read_to_string(path).unwrap();
        let shipped = &c.limiters.worker_utilization;
        for (key, value, default) in [
            ("end_of_good", shipped.end_of_good.to_string(), "0.7"),
            ("start_of_bad", shipped.start_of_bad.to_string(), "0.8"),
            ("sample_interval", shipped.sample_interval.to_string(), "8s"),
        ] {
            let line = format!("    {key}: {value}");
            let note = format!("# demo (default {default})");
            let documented = text
                .lines()
                .any(|l| l.starts_with(&line) && (value == default || l.ends_with(&note)));
            assert!(
                documented,
                "config.yaml: {key} is {value} without a `# demo (default {default})` note"
            );
        }
        assert_eq!(c.admin, d.admin);
        assert_eq!(c.classifier, d.classifier);
    }
}
