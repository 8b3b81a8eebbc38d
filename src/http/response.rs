//! Rejection responses: 429/503 with `Retry-After` and an RFC 9457 problem+json body.

use crate::limiter::{RatePolicy, RejectStatus, Rejection};
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use serde_json::{json, Value};
use std::time::Duration;

/// Whole seconds, rounded up, at least 1.
pub fn retry_after_secs(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

/// "1 second", "8 seconds".
fn seconds(n: u64) -> String {
    if n == 1 {
        "1 second".to_owned()
    } else {
        format!("{n} seconds")
    }
}

/// The media type of every refusal's body.
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// A problem+json body; `extra` members are merged into it.
fn problem_body(status: StatusCode, title: &str, detail: &str, extra: Value) -> Value {
    let mut body = json!({
        "type": format!("urn:brownout:problem:{}", title.to_ascii_lowercase().replace(' ', "-")),
        "title": title,
        "status": status.as_u16(),
        "detail": detail,
    });
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    body
}

/// A problem+json response; `extra` members are merged into the body.
pub fn problem(status: StatusCode, title: &str, detail: &str, extra: Value) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON)))
        .body(problem_body(status, title, detail, extra).to_string())
}

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

/// A refusal as any framework answers it: the status, `Retry-After` (s) and the
/// problem+json body naming the limiter, the tier, the request-rate policy other than the
/// client's bucket that was exceeded (`per_ip` or a quota's name), and when to retry.
pub(crate) struct Refusal {
    pub(crate) status: u16,
    pub(crate) retry_after: u64,
    /// The problem's title (a gRPC client reads it as the status message).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) title: &'static str,
    pub(crate) body: String,
}

impl Refusal {
    /// The refusal of `r`, naming `policy`.
    pub(crate) fn of(r: &Rejection, policy: Option<&str>) -> Self {
        let secs = retry_after_secs(r.retry_after);
        let wait = seconds(secs);
        let status = match r.status {
            RejectStatus::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            RejectStatus::ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        };
        let (title, detail) = r.limiter.problem(r, policy, &wait);
        let mut extra = json!({
            "limiter": r.limiter.as_str(),
            "tier": r.tier.as_str(),
            "retry_after_seconds": secs,
        });
        if let (Some(name), Some(map)) = (policy, extra.as_object_mut()) {
            let member = match r.policy {
                Some(RatePolicy::PerIp) => "policy",
                Some(RatePolicy::Quota(_)) | None => "quota",
            };
            map.insert(member.into(), name.into());
        }
        Self {
            status: status.as_u16(),
            retry_after: secs,
            title,
            body: problem_body(status, title, &detail, extra).to_string(),
        }
    }

    /// The answer for a `tier` request stopped at `limiters.deadline.after` (with
    /// `deadline.cancel`): 503, retry in a second.
    pub(crate) fn deadline(after: Duration, tier: crate::tier::Tier) -> Self {
        let status = StatusCode::SERVICE_UNAVAILABLE;
        let title = "Request took too long";
        let detail = format!(
            "The server stopped this {tier} request after {} ms without an answer: it is overloaded. Retry in 1 second.",
            after.as_millis()
        );
        let extra = json!({"limiter": "deadline", "tier": tier.as_str(), "retry_after_seconds": 1});
        Self {
            status: status.as_u16(),
            retry_after: 1,
            title,
            body: problem_body(status, title, &detail, extra).to_string(),
        }
    }
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

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
