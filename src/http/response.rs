//! The actix middleware's refusals as actix responses ([`Refusal`]).

use super::refusal::{Refusal, PROBLEM_JSON};
use crate::limiter::Rejection;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use std::time::Duration;

/// The answer for a request stopped at `limiters.deadline.after` (with `deadline.cancel`).
pub fn deadline_response(after: Duration, tier: crate::tier::Tier) -> HttpResponse {
    let refusal = Refusal::deadline(after, tier);
    let mut response = HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
        .insert_header((header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON)))
        .body(refusal.body);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(refusal.retry_after));
    response
}

/// The response for a rejection ([`Refusal`]).
pub fn rejection_response(r: &Rejection, policy: Option<&str>) -> HttpResponse {
    let refusal = Refusal::of(r, policy);
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let mut response = HttpResponse::build(status)
        .insert_header((header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON)))
        .body(refusal.body);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(refusal.retry_after));
    response
}
