//! The worker-utilization control loop's parts: utilization sources, the controller's math
//! (`Controller`, `probabilities`: pure and clock-injected, crate-private) and the published
//! [`ShedPlan`]. The actors that drive them live in `crate::actors`.

mod average;
mod controller;
mod demand;
mod plan;
mod source;

#[cfg(feature = "simulate")]
pub(crate) use average::TimeAverage;
pub use average::OBSERVE_EVERY;
pub(crate) use controller::{Controller, ControllerParams};
#[cfg(feature = "simulate")]
pub(crate) use demand::offered_work;
pub(crate) use demand::{with_shed, InFlightSource, Traffic};
pub use plan::ShedPlan;
pub(crate) use plan::{
    cohort_epoch, cohort_score, probabilities, should_drop, PublishedPlan, TierShed,
};
#[cfg(feature = "cpu")]
pub(crate) use source::CpuSource;
pub(crate) use source::InFlight;
pub(crate) use source::{combine, RuntimeRegistry, RuntimeSource};
pub use source::{source_fn, FnSource, SourceError, UtilizationSource};
