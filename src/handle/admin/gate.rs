//! What every admin request passes before a handler runs: the bearer token (checked before a
//! byte of the body is read, so an unauthenticated client cannot make the server buffer or
//! wait for anything), and a body read with a size limit and a deadline.

use super::error::AdminError;
use super::{MAX_BODY, MAX_HEADERS};
use crate::classify::bearer;
use crate::handle::Brownout;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{web, ResponseError};
use std::time::Duration;
use subtle::ConstantTimeEq;

/// Whether `authorization` carries `token` (scheme in any case; compared in constant time).
pub(crate) fn authorized(authorization: Option<&[u8]>, token: &str) -> bool {
    let given = authorization.and_then(bearer).unwrap_or_default();
    let expected = token.as_bytes();
    given.len() == expected.len() && bool::from(given.ct_eq(expected))
}

/// Paths anyone may read: the health check, and the metrics unless `admin.metrics_auth`.
fn is_open(path: &str, brownout: &Brownout) -> bool {
    path == "/healthz" || (path == "/metrics" && !brownout.settings().metrics_auth)
}

/// The admin server's middleware: every route but the open ones needs the token, checked
/// before any handler (and so any body extractor) runs.
pub(super) async fn require_token(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    // Before the token: a 100 KB Authorization is not compared, nor kept for a handler.
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if header_bytes > MAX_HEADERS {
        let refused = AdminError::HeadersTooLarge.error_response();
        return Ok(req.into_response(refused).map_into_right_body());
    }
    let allowed = match req.app_data::<web::Data<Brownout>>() {
        Some(brownout) => {
            is_open(req.path(), brownout)
                || authorized(
                    req.headers()
                        .get(header::AUTHORIZATION)
                        .map(HeaderValue::as_bytes),
                    &brownout.inner.admin_token,
                )
        }
        None => false,
    };
    if allowed {
        Ok(next.call(req).await?.map_into_left_body())
    } else {
        let denied = AdminError::Unauthorized.error_response();
        Ok(req.into_response(denied).map_into_right_body())
    }
}

/// Reads a request body of at most [`MAX_BODY`] bytes within `deadline`: 413 for a body too
/// large (announced or sent), 408 and a closed connection for one that does not arrive in time.
pub(super) async fn read_body(
    req: &actix_web::HttpRequest,
    payload: web::Payload,
    deadline: Duration,
) -> Result<web::Bytes, AdminError> {
    let announced = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(AdminError::PayloadTooLarge);
    }
    match tokio::time::timeout(deadline, payload.to_bytes_limited(MAX_BODY)).await {
        Ok(Ok(Ok(body))) => Ok(body),
        Ok(Ok(Err(e))) => Err(AdminError::invalid("body", e.to_string())),
        Ok(Err(_)) => Err(AdminError::PayloadTooLarge),
        Err(_) => Err(AdminError::BodyTimeout(deadline.as_millis())),
    }
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
