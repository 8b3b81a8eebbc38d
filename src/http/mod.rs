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

pub use body::TrackedBody;
pub use middleware::{BrownoutMiddleware, BrownoutService};
pub use respond::ResponseFuture;
pub(crate) use response::problem;
// What the tower layer shares with the middleware (`crate::tower`).
#[cfg(feature = "tower")]
pub(crate) use after::count_failure;
#[cfg(feature = "tower")]
pub(crate) use ratelimit::FieldCache;
#[cfg(feature = "tower")]
pub(crate) use respond::{named_policy, rejected_fields, wait_for_room};
#[cfg(feature = "tower")]
pub(crate) use response::{Refusal, PROBLEM_JSON};
