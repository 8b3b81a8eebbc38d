//! The worker-utilization control loop's parts: utilization sources, the controller's math
//! ([`Controller`], [`probabilities`], pure and clock-injected) and the published
//! [`ShedPlan`]. The actors that drive them live in `crate::actors`.

mod average;
mod controller;
mod demand;
mod plan;
mod source;

pub use average::{TimeAverage, OBSERVE_EVERY};
pub use controller::{Controller, ControllerParams};
pub use demand::{offered_work, with_shed, InFlightSource, Traffic};
pub use plan::{cohort_epoch, cohort_score, probabilities, should_drop, PublishedPlan, ShedPlan};
#[cfg(feature = "cpu")]
pub use source::CpuSource;
pub use source::{
    combine, source_fn, FnSource, InFlight, RuntimeRegistry, RuntimeSource, SourceError,
    UtilizationSource,
};
