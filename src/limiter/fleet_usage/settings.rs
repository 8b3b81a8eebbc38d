//! `limiters.fleet_usage:` — the fleet-usage limiter's settings and their validation.

use crate::schema::validate::{duration, ensure, share, Valid, MS_TO_A_DAY};
use crate::schema::{HumanDuration, Mode};
use serde::{Deserialize, Serialize};

/// `limiters.fleet_usage:` — capacity reserved for critical traffic.
///
/// # Examples
/// ```
/// use brownout::{Config, Mode};
///
/// let config = Config::from_yaml_str(
///     "limiters:\n  fleet_usage:\n    mode: enforce\n    capacity: 400\n    reserved_for_critical: 0.2\n",
/// )?;
/// let fu = &config.limiters.fleet_usage;
/// assert_eq!((fu.mode, fu.capacity, fu.reserved_for_critical), (Mode::Enforce, 400, 0.2));
///
/// // Out of range: refused with the key, the rule and the line.
/// let err = Config::from_yaml_str(
///     "limiters:\n  fleet_usage:\n    reserved_for_critical: 1.5\n",
/// )
/// .unwrap_err();
/// assert_eq!(err.key(), Some("limiters.fleet_usage.reserved_for_critical"));
/// assert!(err.to_string().ends_with("(line 3)"), "{err}");
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct FleetUsageConfig {
    /// enforce | dark | off.
    pub mode: Mode,
    /// Requests in progress the fleet (in memory: this process) can serve.
    pub capacity: u32,
    /// Share of `capacity` only critical requests may use.
    pub reserved_for_critical: f64,
    /// `Retry-After` of a rejected request.
    pub retry_after: HumanDuration,
}

impl Default for FleetUsageConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            capacity: 100,
            reserved_for_critical: 0.2,
            retry_after: HumanDuration::from_secs(1),
        }
    }
}

impl FleetUsageConfig {
    /// In-flight non-critical requests allowed: `(1 - reserved) × capacity`, rounded down.
    pub fn non_critical_limit(&self) -> u64 {
        // (The cast rounds down, as floor would, without a call to it on every request.)
        ((1.0 - self.reserved_for_critical) * f64::from(self.capacity)) as u64
    }
}

impl FleetUsageConfig {
    pub(crate) fn validate(&self) -> Valid {
        let key = "limiters.fleet_usage";
        ensure(
            (1..=MAX_CAPACITY).contains(&self.capacity),
            &format!("{key}.capacity"),
            format!("must be between 1 and {MAX_CAPACITY} (got {})", self.capacity),
        )?;
        share(
            self.reserved_for_critical,
            &format!("{key}.reserved_for_critical"),
        )?;
        ensure(
            self.reserved_for_critical < 1.0,
            &format!("{key}.reserved_for_critical"),
            "must be less than 1 (non-critical traffic needs some capacity)",
        )?;
        // Every tier gets at least one slot: non-critical requests what is not reserved.
        let least = (1.0 / (1.0 - self.reserved_for_critical)).ceil() as u64;
        ensure(
            self.non_critical_limit() >= 1,
            &format!("{key}.capacity"),
            format!(
                "is {}, which leaves no slot to non-critical requests once {} is reserved for critical ones; it must be at least {least}",
                self.capacity, self.reserved_for_critical
            ),
        )?;
        duration(
            self.retry_after.get(),
            &format!("{key}.retry_after"),
            MS_TO_A_DAY,
        )
    }
}

/// The most requests `capacity` may say the fleet serves at once.
const MAX_CAPACITY: u32 = 10_000_000;

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
