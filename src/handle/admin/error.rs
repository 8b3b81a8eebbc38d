//! Every refusal of the admin API as one typed error, answered by every admin server alike
//! ([`AdminError::reply`]): a problem+json body (RFC 9457) naming the field where there is one.

use super::reply::Reply;
use super::{MAX_BODY, MAX_HEADERS};
use crate::http::{problem_body, PROBLEM_JSON};
use crate::ops::ChangeError;
use serde_json::{json, Value};

/// Why an admin request was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No token, or the wrong one.
    #[error("Send this server's admin token as Authorization: Bearer <token>; none was sent, or not that one.")]
    Unauthorized,
    /// No such route.
    #[error("No such admin endpoint.")]
    NotFound,
    /// The route exists, not with this method; the methods it takes (`Allow`).
    #[error("This endpoint takes {0} only.")]
    MethodNotAllowed(&'static str),
    /// `PUT /v1/limiters/{name}/mode` with a name that is not a limiter.
    #[error("There is no limiter named `{0}`; the limiters are {names}.", names = crate::limiter::LimiterName::names())]
    UnknownLimiter(String),
    /// A field is missing, of the wrong type or out of range.
    #[error("{field}: {message}")]
    Invalid {
        /// The dotted field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The body is not JSON.
    #[error("Send the body as application/json.")]
    UnsupportedMediaType,
    /// The body is over [`MAX_BODY`].
    #[error("Admin request bodies are limited to {MAX_BODY} bytes.")]
    PayloadTooLarge,
    /// The headers are over [`MAX_HEADERS`] bytes.
    #[error("Admin request headers are limited to {MAX_HEADERS} bytes in all.")]
    HeadersTooLarge,
    /// The body did not arrive within `admin.body_timeout` (milliseconds).
    #[error("The body did not arrive within {0} ms (admin.body_timeout).")]
    BodyTimeout(u128),
    /// The operator refused the change.
    #[error(transparent)]
    Change(#[from] ChangeError),
    /// What was asked cannot be read from this store.
    #[error("{0}")]
    NotReadable(String),
}

impl AdminError {
    /// A refusal of `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    fn title(&self) -> &'static str {
        match self {
            AdminError::Unauthorized => "Unauthorized",
            AdminError::NotFound => "Not found",
            AdminError::MethodNotAllowed(_) => "Method not allowed",
            AdminError::UnknownLimiter(_) => "Unknown limiter",
            AdminError::Invalid { .. } | AdminError::Change(ChangeError::Invalid(_)) => {
                "Invalid request"
            }
            AdminError::UnsupportedMediaType => "Unsupported media type",
            AdminError::PayloadTooLarge => "Payload too large",
            AdminError::HeadersTooLarge => "Request header fields too large",
            AdminError::BodyTimeout(_) => "Request timeout",
            AdminError::Change(ChangeError::Stale { .. }) => "Stale version",
            AdminError::Change(ChangeError::NotRunning | ChangeError::NoFile) => "Not running",
            AdminError::Change(ChangeError::NotPersisted { .. }) => "Not persisted",
            AdminError::Change(ChangeError::Contended) => "Conflict",
            AdminError::NotReadable(_) => "Not available",
        }
    }

    /// The detail sentence and the extra members of the problem body.
    fn detail(&self) -> (String, Value) {
        match self {
            AdminError::Invalid { field, .. } => (self.to_string(), json!({ "field": field })),
            AdminError::Change(e @ ChangeError::Invalid(c)) => {
                // The sentence names its key (once); a document-level error gets it in front.
                let field = c.key().unwrap_or("limiters");
                let detail = match c.key() {
                    Some(_) => e.to_string(),
                    None => format!("{field}: {e}"),
                };
                (detail, json!({ "field": field }))
            }
            AdminError::Change(e @ ChangeError::Stale { current, .. }) => (
                format!("{e}. Fetch GET /v1/config and apply your change to version {current}."),
                json!({ "current_version": current }),
            ),
            AdminError::Change(e @ ChangeError::NotPersisted { path, .. }) => (
                format!("{e}. Nothing was changed; fix the file's directory and retry."),
                json!({ "file": path.display().to_string(), "key": "admin.overrides_file" }),
            ),
            AdminError::PayloadTooLarge => (self.to_string(), json!({ "limit_bytes": MAX_BODY })),
            AdminError::HeadersTooLarge => {
                (self.to_string(), json!({ "limit_bytes": MAX_HEADERS }))
            }
            other => (other.to_string(), Value::Null),
        }
    }
}

impl AdminError {
    /// The HTTP status of this refusal.
    pub(crate) fn status(&self) -> u16 {
        match self {
            AdminError::Unauthorized => 401,
            AdminError::NotFound | AdminError::UnknownLimiter(_) => 404,
            AdminError::MethodNotAllowed(_) => 405,
            AdminError::Invalid { .. } | AdminError::Change(ChangeError::Invalid(_)) => 400,
            AdminError::UnsupportedMediaType => 415,
            AdminError::PayloadTooLarge => 413,
            AdminError::HeadersTooLarge => 431,
            AdminError::BodyTimeout(_) => 408,
            AdminError::Change(ChangeError::Stale { .. }) => 412,
            AdminError::Change(ChangeError::Contended) => 409,
            AdminError::Change(_) => 503,
            AdminError::NotReadable(_) => 503,
        }
    }

    /// The refusal as every admin server answers it: a problem+json body, a challenge for a
    /// missing token, and a closed connection where the body was not (or not wholly) read, so
    /// that it is not taken for the next request.
    pub(crate) fn reply(&self) -> Reply {
        let (detail, extra) = self.detail();
        let status = self.status();
        Reply {
            status,
            content_type: PROBLEM_JSON,
            body: problem_body(status, self.title(), &detail, extra)
                .to_string()
                .into_bytes(),
            etag: None,
            allow: match self {
                AdminError::MethodNotAllowed(methods) => Some(methods),
                _ => None,
            },
            challenge: matches!(self, AdminError::Unauthorized),
            close: matches!(
                self,
                AdminError::Unauthorized
                    | AdminError::PayloadTooLarge
                    | AdminError::HeadersTooLarge
                    | AdminError::BodyTimeout(_)
            ),
        }
    }
}
