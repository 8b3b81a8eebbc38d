//! What is left for when the app has answered a request let through: the RateLimit fields
//! (written down at decision time, from what the limiter saw) and the failure quotas.

use super::room::count_failure;
use crate::engine::{Admission, Engine, EngineRef};
use crate::limiter::request_rate::{FailureTicket, RateStatus};
use crate::store::Held;
use actix_web::dev::ServiceResponse;
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};

const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Adds the fields that a rejection or an allowed response's [`RateFields`] wrote.
pub(super) fn insert_rate_fields(
    headers: &mut HeaderMap,
    [policy, value]: [Option<HeaderValue>; 2],
) {
    if let Some(policy) = policy {
        headers.insert(RATELIMIT_POLICY, policy);
    }
    if let Some(value) = value {
        headers.insert(RATELIMIT, value);
    }
}

/// Where a response's RateLimit fields come from: the worker's caches in the middleware,
/// written afresh in fleet mode.
pub(super) trait RateFields {
    /// `RateLimit-Policy` for `status`.
    fn policy(&self, status: &RateStatus) -> Option<HeaderValue>;
    /// `RateLimit` of an allowed response for `status`.
    fn allowed(&self, status: &RateStatus) -> Option<HeaderValue>;
}

/// Work left for when the app has answered: the RateLimit fields (written down at decision
/// time, from what the limiter saw) and failure quotas.
pub(super) struct AfterResponse {
    /// Where the request was decided (its failures are counted there).
    held: Held,
    /// `RateLimit-Policy` and `RateLimit`.
    fields: [Option<HeaderValue>; 2],
    failures: Option<FailureTicket>,
}

impl AfterResponse {
    /// What `admission` leaves for its response, if anything. (Inlined: most requests leave
    /// nothing, and the check is a few instructions.)
    #[inline]
    pub(super) fn new<Q: EngineRef>(
        admission: &Admission<'_, Q>,
        fields: &dyn RateFields,
    ) -> Option<Self> {
        (admission.rate.is_some() || admission.failures.is_some()).then(|| Self {
            held: admission.held,
            fields: admission.rate.map_or([None, None], |status| {
                [fields.policy(&status), fields.allowed(&status)]
            }),
            failures: admission.failures,
        })
    }

    /// Writes the fields into `response` and counts its failure, in `engine`.
    pub(super) fn apply<B>(self, engine: &Engine, response: &mut ServiceResponse<B>) {
        insert_rate_fields(response.headers_mut(), self.fields);
        if let Some(ticket) = &self.failures {
            count_failure(engine, self.held, ticket, response.status().as_u16());
        }
    }
}
