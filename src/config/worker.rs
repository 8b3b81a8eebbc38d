//! `limiters.worker_utilization:`: the controller's settings, its sources and its bands.

use super::{HumanDuration, Mode};
use crate::tier::{PerTier, Tier};
use serde::{Deserialize, Serialize};

/// Where the worker-utilization controller reads utilization from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SourceKind {
    /// Requests in progress through the middleware divided by `capacity`.
    InFlight,
    /// This process's CPU share.
    Cpu,
    /// Busy ratio of the actix worker runtimes.
    Runtime,
    /// The gauge the embedding app registered with the builder.
    Custom,
    /// The maximum of `sources`.
    Max,
}

/// How a tier's drop probability picks the requests to drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Selection {
    /// A fresh draw for every request.
    Random,
    /// The same keys are shed for `cohort_rotation`, then another cohort.
    Cohort,
}

/// The stretch of the shedding amount over which each tier's drop probability rises 0 → 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Bands {
    /// First to go.
    pub test: [f64; 2],
    /// Second.
    pub get: [f64; 2],
    /// Last of the sheddable tiers.
    pub post: [f64; 2],
    /// Only used with `shed_critical: true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub critical: Option<[f64; 2]>,
}

impl Default for Bands {
    fn default() -> Self {
        Self {
            test: [0.0, 1.0 / 3.0],
            get: [1.0 / 3.0, 2.0 / 3.0],
            post: [2.0 / 3.0, 1.0],
            critical: None,
        }
    }
}

/// Upper bound of each tier's drop probability (each defaults to 1: no cap).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct MaxShed {
    /// Cap for the critical tier.
    pub critical: f64,
    /// Cap for the post tier.
    pub post: f64,
    /// Cap for the get tier.
    pub get: f64,
    /// Cap for the test tier.
    pub test: f64,
}

impl Default for MaxShed {
    fn default() -> Self {
        Self {
            critical: 1.0,
            post: 1.0,
            get: 1.0,
            test: 1.0,
        }
    }
}

impl MaxShed {
    /// The cap of `tier`.
    pub fn get(&self, tier: Tier) -> f64 {
        PerTier {
            critical: self.critical,
            post: self.post,
            get: self.get,
            test: self.test,
        }
        .get(tier)
    }
}

/// `limiters.worker_utilization:` — Stripe's worker-utilization load shedder.
///
/// # Examples
/// ```
/// use brownout::config::SourceKind;
/// use brownout::Config;
///
/// let config = Config::from_yaml_str(
///     "limiters:
///   worker_utilization:
///     source: in_flight
///     capacity: 16
///     sample_interval: 2s
///     seconds_before_shedding: 10
///     seconds_to_shed_all: 60
/// ",
/// )?;
/// let wu = &config.limiters.worker_utilization;
/// assert_eq!((wu.source, wu.capacity), (SourceKind::InFlight, 16));
/// assert_eq!((wu.end_of_good, wu.start_of_bad), (0.7, 0.8), "Stripe's thresholds by default");
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct WorkerUtilizationConfig {
    /// enforce | dark | off.
    pub mode: Mode,
    /// in_flight | cpu | runtime | custom | max.
    pub source: SourceKind,
    /// With `source: max`, the sources to take the maximum of.
    pub sources: Vec<SourceKind>,
    /// In-flight requests that mean 100% utilization (`source: in_flight`).
    pub capacity: u32,
    /// How often utilization is sampled.
    pub sample_interval: HumanDuration,
    /// Below this utilization, shedding recovers.
    pub end_of_good: f64,
    /// At or above this utilization, shedding grows.
    pub start_of_bad: f64,
    /// How long a fully bad server waits before shedding anything.
    pub seconds_before_shedding: f64,
    /// How long a fully bad server takes to go from shedding nothing to everything.
    pub seconds_to_shed_all: f64,
    /// Where on the amount scale each tier is shed.
    pub bands: Bands,
    /// Let this limiter shed critical traffic too (needs `bands.critical`).
    pub shed_critical: bool,
    /// Upper bound of each tier's drop probability.
    pub max_shed: MaxShed,
    /// random | cohort.
    pub selection: Selection,
    /// How long one cohort is shed before another is chosen.
    pub cohort_rotation: HumanDuration,
    /// `Retry-After` of a shed request (default: one `sample_interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<HumanDuration>,
}

impl Default for WorkerUtilizationConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Enforce,
            source: SourceKind::InFlight,
            sources: Vec::new(),
            capacity: 64,
            sample_interval: HumanDuration::from_secs(8),
            end_of_good: 0.7,
            start_of_bad: 0.8,
            seconds_before_shedding: 28.0,
            seconds_to_shed_all: 120.0,
            bands: Bands::default(),
            shed_critical: false,
            max_shed: MaxShed::default(),
            selection: Selection::Random,
            cohort_rotation: HumanDuration::from_secs(300),
            retry_after: None,
        }
    }
}
