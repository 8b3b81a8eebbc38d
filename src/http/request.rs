//! The request as the limiters see it, read from actix's request once classified (the
//! middleware and its fleet-mode path both build it here).

use crate::classify::Classified;
use crate::limiter::Request;
use actix_web::dev::ServiceRequest;

/// The request as the limiters see it.
#[inline]
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
    }
}
