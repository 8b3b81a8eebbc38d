//! Why a configuration was refused ([`ConfigError`]), and the checks every section's validation
//! is written with: each refusal names its dotted key.

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
    /// [`app_section`](crate::config::app_section)).
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

/// The answer of a range check: nothing, or the setting it refuses and why.
pub(crate) type Valid = Result<(), ConfigError>;

pub(crate) fn ensure(ok: bool, key: &str, message: impl Into<String>) -> Valid {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(key, message))
    }
}

/// A number as a message shows it: plainly when it reads well, in exponent form when it is
/// tiny or huge (`1e-320`, not three hundred zeros).
pub(crate) struct Num(pub f64);

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.0;
        if v != 0.0 && v.is_finite() && !(1e-4..1e9).contains(&v.abs()) {
            write!(f, "{v:e}")
        } else {
            write!(f, "{v}")
        }
    }
}

/// The smallest share, cap, reserve or band width other than 0: a smaller one (a denormal,
/// say) would act as 0 while reading as something else.
pub(crate) const MIN_SHARE: f64 = 0.01;

/// A share of something (of a limit, of the capacity, of the drop probability): 0, or from
/// [`MIN_SHARE`] to 1.
pub(crate) fn share(value: f64, key: &str) -> Valid {
    ensure(
        value == 0.0 || (value.is_finite() && (MIN_SHARE..=1.0).contains(&value)),
        key,
        format!(
            "must be 0 or between {MIN_SHARE} and 1 (got {})",
            Num(value)
        ),
    )
}

/// A duration from `min` to `max`, both written as the file writes them.
pub(crate) fn duration(
    value: std::time::Duration,
    key: &str,
    (min, max): (std::time::Duration, std::time::Duration),
) -> Valid {
    use super::HumanDuration;
    ensure(
        (min..=max).contains(&value),
        key,
        format!(
            "must be between {} and {} (got {})",
            HumanDuration(min),
            HumanDuration(max),
            HumanDuration(value)
        ),
    )
}

/// The range of every `retry_after` and cohort rotation: from a millisecond to a day (a
/// longer `Retry-After` is an answer no client waits for).
pub(crate) const MS_TO_A_DAY: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_millis(1),
    std::time::Duration::from_secs(86_400),
);

/// A number of seconds written as a number (the controller's time constants): finite, from
/// `min` to `max`.
pub(crate) fn seconds(value: f64, key: &str, (min, max): (f64, f64)) -> Valid {
    ensure(
        value.is_finite() && (min..=max).contains(&value),
        key,
        format!(
            "must be between {min} and {max} seconds (got {})",
            Num(value)
        ),
    )
}

/// Most keys a table may be sized for (16 bytes each, 24 in a token bucket's table, allocated
/// at start).
const MAX_KEYS: usize = 100_000_000;

/// A key table's size: `key` names it.
pub(crate) fn max_keys(n: usize, key: &str) -> Valid {
    ensure(
        (8..=MAX_KEYS).contains(&n),
        key,
        format!("must be between 8 and 100000000 (got {n}; each key takes 16 bytes, 24 in a token bucket's table, allocated at start)"),
    )
}
