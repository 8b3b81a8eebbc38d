//! The HTTP side: the actix middleware and the responses it makes (the admin server is the
//! handle's, in `handle/admin`).

mod after;
mod body;
mod deadline;
#[cfg(feature = "redis")]
mod fleet;
mod middleware;
mod ratelimit;
mod request;
mod respond;
mod response;
mod route;
mod worker;

pub(crate) use after::count_failure;
pub use body::TrackedBody;
pub(crate) use middleware::Hooks;
pub use middleware::{BrownoutMiddleware, BrownoutService, KeyHook, PlanHook, TierHook};
pub(crate) use ratelimit::FieldCache;
pub use respond::ResponseFuture;
pub(crate) use respond::{named_policy, refuse_waited, rejected_fields};
pub(crate) use response::{problem, Refusal, PROBLEM_JSON};
