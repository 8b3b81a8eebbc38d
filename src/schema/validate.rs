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

pub(crate) type Check = Result<(), ConfigError>;

pub(crate) fn ensure(ok: bool, key: &str, message: impl Into<String>) -> Check {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(key, message))
    }
}

pub(crate) fn ratio(value: f64, key: &str) -> Check {
    ensure(
        value.is_finite() && (0.0..=1.0).contains(&value),
        key,
        format!("must be between 0 and 1 (got {value})"),
    )
}

/// Most keys a table may be sized for (16 bytes each, allocated at start).
const MAX_KEYS: usize = 100_000_000;

/// A key table's size: `key` names it.
pub(crate) fn max_keys(n: usize, key: &str) -> Check {
    ensure(
        (8..=MAX_KEYS).contains(&n),
        key,
        format!("must be between 8 and 100000000 (got {n}; each key takes 16 bytes, allocated at start)"),
    )
}
