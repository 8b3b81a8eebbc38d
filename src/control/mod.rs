//! The worker-utilization control loop: sources → sampler actor → controller actor → published
//! [`ShedPlan`]. The math ([`Controller`], [`probabilities`]) is pure; the actors are tokio tasks.

pub(crate) mod actors;
mod controller;
mod plan;
mod source;

pub use controller::{Controller, ControllerParams};
pub use plan::{cohort_epoch, cohort_score, probabilities, should_drop, PublishedPlan, ShedPlan};
pub use source::{
    combine, source_fn, CpuSource, FnSource, InFlight, InFlightSource, RuntimeRegistry,
    RuntimeSource, SourceError, UtilizationSource,
};
