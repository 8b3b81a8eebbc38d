//! The HTTP side: the actix middleware, rejection responses, and the admin server.

mod admin;
mod body;
mod deadline;
#[cfg(feature = "redis")]
mod fleet;
mod middleware;
mod ratelimit;
mod request;
mod respond;
mod response;

pub use admin::{AdminServer, MIN_TOKEN_LEN};
pub use body::TrackedBody;
pub use middleware::{BrownoutMiddleware, BrownoutService};
pub use respond::ResponseFuture;
pub(crate) use response::problem;
