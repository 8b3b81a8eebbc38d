//! The HTTP side: what both front doors answer (refusals and their problem+json bodies, the
//! RateLimit fields, the wait for adaptive_concurrency's room, pacing's wait), and with the `actix` feature
//! the actix middleware and the responses it makes. The admin API is the handle's
//! (`handle/admin`).

#[cfg(feature = "actix")]
mod after;
#[cfg(feature = "actix")]
mod body;
#[cfg(feature = "actix")]
mod deadline;
#[cfg(feature = "actix")]
mod later;
#[cfg(feature = "actix")]
mod middleware;
mod pace;
mod ratelimit;
mod refusal;
#[cfg(feature = "actix")]
mod request;
#[cfg(feature = "actix")]
mod respond;
#[cfg(feature = "actix")]
mod response;
mod room;
#[cfg(feature = "actix")]
mod route;
#[cfg(feature = "actix")]
mod worker;

#[cfg(feature = "actix")]
pub use body::TrackedBody;
#[cfg(feature = "actix")]
pub use middleware::{BrownoutMiddleware, BrownoutService};
pub(crate) use refusal::problem_body;
pub(crate) use refusal::PROBLEM_JSON;
#[cfg(feature = "actix")]
pub use respond::ResponseFuture;
// What the tower layer shares with the middleware (`crate::tower`).
pub(crate) use pace::{refuse as refuse_paced, Turn};
#[cfg(feature = "tower")]
pub(crate) use ratelimit::FieldCache;
#[cfg(feature = "tower")]
pub(crate) use refusal::{named_policy, rejected_fields, Refusal};
#[cfg(feature = "tower")]
pub(crate) use room::{count_failure, wait_for_room};
