//! `limiters.concurrent_requests:` — the concurrent-requests limiter's settings and their
//! validation.

use crate::schema::validate::{duration, ensure, max_keys, Valid, MS_TO_A_DAY};
use crate::schema::{HumanDuration, Mode};
use serde::{Deserialize, Serialize};

/// `limiters.concurrent_requests:` — a per-key cap on requests in progress.
///
/// # Examples
/// ```
/// use brownout::{Config, Mode};
///
/// let config = Config::from_yaml_str(
///     "limiters:\n  concurrent_requests:\n    mode: dark\n    max_in_flight: 20\n",
/// )?;
/// let cr = &config.limiters.concurrent_requests;
/// assert_eq!((cr.mode, cr.max_in_flight), (Mode::Dark, 20));
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ConcurrentRequestsConfig {
    /// enforce | dark | off.
    pub mode: Mode,
    /// Most requests one key may have in progress.
    pub max_in_flight: u32,
    /// `Retry-After` of a rejected request.
    pub retry_after: HumanDuration,
    /// Most keys with requests in progress tracked at once.
    pub max_keys: usize,
}

impl Default for ConcurrentRequestsConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            max_in_flight: 20,
            retry_after: HumanDuration::from_secs(1),
            max_keys: 65_536,
        }
    }
}

impl ConcurrentRequestsConfig {
    pub(crate) fn validate(&self) -> Valid {
        let key = "limiters.concurrent_requests";
        ensure(
            self.max_in_flight >= 1,
            &format!("{key}.max_in_flight"),
            "must be at least 1",
        )?;
        duration(
            self.retry_after.get(),
            &format!("{key}.retry_after"),
            MS_TO_A_DAY,
        )?;
        max_keys(self.max_keys, &format!("{key}.max_keys"))
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
