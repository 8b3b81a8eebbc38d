//! gRPC in its own words: a refused call is answered as gRPC clients expect, not with an HTTP
//! error a gRPC client reads as a broken connection. The answer is trailers-only (HTTP 200,
//! the status in the headers, no body): `grpc-status` 8 (RESOURCE_EXHAUSTED) where HTTP would
//! say 429, 14 (UNAVAILABLE) where it would say 503 (4, DEADLINE_EXCEEDED, for a call stopped at
//! `limiters.deadline`), a `grpc-message` naming the limiter and
//! when to retry, and `grpc-retry-pushback-ms` (gRFC A6: how long a client that retries should
//! wait). Routes, costs and critical routes name gRPC methods by their HTTP form:
//! `POST /package.Service/Method`.

use super::body::BrownoutBody;
use crate::http::Refusal;
use crate::limiter::{RejectStatus, Rejection};
use crate::tier::Tier;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::Response;
use std::time::Duration;

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// RESOURCE_EXHAUSTED.
pub const RESOURCE_EXHAUSTED: u16 = 8;
/// UNAVAILABLE.
pub const UNAVAILABLE: u16 = 14;
/// DEADLINE_EXCEEDED.
pub const DEADLINE_EXCEEDED: u16 = 4;

/// Whether a request is a gRPC call (`content-type: application/grpc`, `application/grpc+proto`…).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// The gRPC status of a refusal with `status`.
pub fn status_code(status: RejectStatus) -> u16 {
    match status {
        RejectStatus::TooManyRequests => RESOURCE_EXHAUSTED,
        RejectStatus::ServiceUnavailable => UNAVAILABLE,
    }
}

/// The trailers-only answer refusing a call for `rejection`.
pub(super) fn refusal<B>(rejection: &Rejection, refusal: &Refusal) -> Response<BrownoutBody<B>> {
    let message = format!(
        "{} ({}, {} tier); retry in {} s",
        refusal.title,
        rejection.limiter.as_str(),
        rejection.tier.as_str(),
        refusal.retry_after
    );
    trailers_only(status_code(rejection.status), &message, refusal.retry_after)
}

/// The trailers-only answer to a call stopped at `limiters.deadline` (with `cancel`):
/// DEADLINE_EXCEEDED, which tells the client that the call may have had effects before it
/// stopped (a 503 in HTTP).
pub(super) fn deadline<B>(
    refusal: &Refusal,
    tier: Tier,
    after: Duration,
) -> Response<BrownoutBody<B>> {
    let message = format!(
        "{} (deadline, {} tier): stopped after {} ms; retry in {} s",
        refusal.title,
        tier.as_str(),
        after.as_millis(),
        refusal.retry_after
    );
    trailers_only(DEADLINE_EXCEEDED, &message, refusal.retry_after)
}

/// A trailers-only answer: `code`, `message`, and `retry_after` seconds as the pushback and as
/// `Retry-After`.
fn trailers_only<B>(code: u16, message: &str, retry_after: u64) -> Response<BrownoutBody<B>> {
    let mut response = Response::new(BrownoutBody::refused(Bytes::new()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(code));
    // Printable ASCII but '%' needs no percent-encoding; the message is written so.
    if let Ok(message) = HeaderValue::from_str(&message.replace('%', "%25")) {
        headers.insert(GRPC_MESSAGE, message);
    }
    headers.insert(
        GRPC_PUSHBACK,
        HeaderValue::from(retry_after.saturating_mul(1000)),
    );
    headers.insert(RETRY_AFTER, HeaderValue::from(retry_after));
    response
}

/// The HTTP status a response stands for, for the failure quotas: a gRPC call's status is its
/// `grpc-status` (0 is OK, anything else an error, counted as a 500) when the app answered
/// trailers-only; in trailers, it is not seen here and the call counts as answered.
pub(super) fn http_status_of<B>(response: &Response<B>, grpc: bool) -> u16 {
    let status = response.status().as_u16();
    if !grpc {
        return status;
    }
    match response
        .headers()
        .get(GRPC_STATUS)
        .map(HeaderValue::as_bytes)
    {
        Some(b"0") | None => status,
        Some(_) => 500,
    }
}
