//! The request as the limiters see it, read from actix's request once classified (the
//! middleware and its fleet-mode path both build it here).

use crate::classify::Classified;
use crate::limiter::Request;
use actix_web::dev::ServiceRequest;
use actix_web::http::header::{ACCESS_CONTROL_REQUEST_METHOD, ORIGIN};
use actix_web::http::Method;

/// The request as the limiters see it. (Always inlined: the middleware's own call and the
/// decisions that wait both build it, and out of line it cost the allowed path a call, a copy
/// and more than half again in actix's path reading.)
#[inline(always)]
pub(super) fn request_of<'a>(
    req: &'a ServiceRequest,
    c: &Classified,
    plan: Option<&'a str>,
) -> Request<'a> {
    Request {
        tier: c.tier,
        key: c.key,
        ip: c.ip,
        method: req.method().as_str(),
        path: req.match_info().as_str(),
        plan,
        preflight: is_preflight(req),
        paid: false,
    }
}

/// Whether `req` is a CORS preflight: `OPTIONS` with `Origin` and
/// `Access-Control-Request-Method` (an `OPTIONS` without them is an ordinary request).
#[inline]
pub(super) fn is_preflight(req: &ServiceRequest) -> bool {
    let headers = req.headers();
    req.method() == Method::OPTIONS
        && headers.contains_key(ORIGIN)
        && headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
}
