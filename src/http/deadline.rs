//! `limiters.deadline` in the middleware: the answer for a request stopped at its deadline
//! (the response future arms the timer, `respond.rs`).

use super::response::deadline_response;
use crate::tier::Tier;
use std::time::Duration;

/// A request stopped at its deadline: the error actix answers with (503, problem+json). The
/// request itself is with the app by then, so brownout answers through the error path.
#[derive(Debug)]
pub(super) struct DeadlinePassed {
    after: Duration,
    tier: Tier,
}

impl DeadlinePassed {
    pub(super) fn new(after: Duration, tier: Tier) -> Self {
        Self { after, tier }
    }
}

impl std::fmt::Display for DeadlinePassed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} request stopped after {:?} without an answer",
            self.tier, self.after
        )
    }
}

impl actix_web::ResponseError for DeadlinePassed {
    fn status_code(&self) -> actix_web::http::StatusCode {
        actix_web::http::StatusCode::SERVICE_UNAVAILABLE
    }
    fn error_response(&self) -> actix_web::HttpResponse {
        deadline_response(self.after, self.tier)
    }
}
