//! Configuration: the YAML file's shape (strictly parsed), its defaults and its validation.
//! [`Config`] assembles the file from its sections, each defined (and validated) where it is
//! used: a limiter's block in its own folder (`src/limiter/<name>/settings.rs`), the rest in
//! `src/schema/`; all of them are re-exported here.
//!
//! Every section rejects unknown keys, durations are human strings (`8s`), and
//! [`Config::validate`] refuses impossible settings with a message that names the key.

mod builder;
pub(crate) mod sections;
mod validate;

pub use crate::limiter::request_rate::{
    Excess, PerIp, PerIpConfig, PlanConfig, QuotaConfig, QuotaCount, QuotaKey, AUTO_PER_IP_CLIENTS,
};
pub use crate::limiter::LimitersConfig;
pub(crate) use crate::schema::parse::describe_json;
pub use crate::schema::{
    AdminConfig, AdminScope, Bands, ClassifierConfig, ConfigError, DeadlineConfig,
    DurationParseError, HumanDuration, MaxShed, Mode, QuotaAlgorithm, Selection, SourceKind,
    StoreConfig, StoreKind, StoreSync,
};
pub use builder::ConfigBuilder;
pub use sections::app_section;

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Each limiter's settings type (defined in its folder), here beside the rest of the file's
/// sections: `brownout::config::RequestRateConfig` and so on, from the one list.
macro_rules! settings_types {
    ($($(#[$doc:meta])* $variant:ident = $index:literal, $name:ident: $krate:tt $(:: $seg:ident)+;)*) => {
        $(pub use $krate $(:: $seg)+;)*
    };
}
crate::limiter::limiter_list!(settings_types);

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Config {
    /// The admin HTTP server.
    pub admin: AdminConfig,
    /// How requests are put into tiers and keyed.
    pub classifier: ClassifierConfig,
    /// The limiters, one section each (request_rate, concurrent_requests, fleet_usage,
    /// worker_utilization, adaptive_concurrency).
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

/// The message `yaml` is refused with (for the tests of every section's validation).
#[cfg(test)]
pub(crate) fn refused(yaml: &str) -> String {
    Config::from_yaml_str(yaml).unwrap_err().to_string()
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod parse_tests;
