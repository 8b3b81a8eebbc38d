//! What every admin request passes before it is routed: the bearer token, checked before a
//! byte of the body is read (`route.rs`), so an unauthenticated client cannot make the server
//! buffer or wait for anything.

use crate::classify::bearer;
use crate::handle::Brownout;
use subtle::ConstantTimeEq;

/// Whether `authorization` carries `token` (scheme in any case; compared in constant time).
pub(crate) fn authorized(authorization: Option<&[u8]>, token: &str) -> bool {
    let given = authorization.and_then(bearer).unwrap_or_default();
    let expected = token.as_bytes();
    given.len() == expected.len() && bool::from(given.ct_eq(expected))
}

/// Paths anyone may read: the health check, and the metrics unless `admin.metrics_auth`.
pub(super) fn is_open(path: &str, brownout: &Brownout) -> bool {
    path == "/healthz" || (path == "/metrics" && !brownout.settings().metrics_auth)
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
