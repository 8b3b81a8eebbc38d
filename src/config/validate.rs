//! Validation of a parsed [`Config`]: impossible settings are refused with the key's name.

use super::{Config, SourceKind, WorkerUtilizationConfig};
use super::{RoutePattern, MAX_FORWARDED_LINES};
use crate::tier::Tier;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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

    /// An error about the dotted `key`: `message` says what is wrong, as in
    /// `shop.workers must be at least 1` (for a program's own sections, see
    /// [`app_section`](super::app_section)).
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
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
        self.validate_store()
    }
}

const WU: &str = "limiters.worker_utilization";

/// Longest `sample_interval`: the controller moves once per interval.
pub(super) const MAX_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

impl WorkerUtilizationConfig {
    /// Checks the worker-utilization block.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_worker_utilization(self)
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
#[path = "validate_tests.rs"]
mod tests;
