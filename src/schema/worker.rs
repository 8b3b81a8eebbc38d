//! `limiters.worker_utilization:`: the controller's settings, its sources and its bands.

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
