//! The admin API's write side: modes, kill switch, config GET/PATCH with ETag and If-Match,
//! and the audit log. Bad input is refused with a problem+json body naming the field;
//! nothing changes.

use super::guard::read_body;
use crate::config::Mode;
use crate::http::problem;
use crate::limiter::LimiterName;
use crate::ops::{Change, ChangeError};
use crate::runtime::Brownout;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// Longest `ttl_seconds` accepted: a week.
const MAX_TTL: u64 = 7 * 86_400;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModeBody {
    mode: Mode,
    #[serde(default)]
    ttl_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KillSwitchBody {
    engaged: bool,
}

/// A refused request; it becomes a problem+json response.
struct Refused {
    status: StatusCode,
    title: &'static str,
    detail: String,
    extra: Value,
}

impl Refused {
    fn response(self) -> HttpResponse {
        problem(self.status, self.title, &self.detail, self.extra)
    }
}

fn bad_request(field: &str, message: &str) -> Refused {
    Refused {
        status: StatusCode::BAD_REQUEST,
        title: "Invalid request",
        detail: format!("{field}: {message}"),
        extra: json!({ "field": field }),
    }
}

fn change_refused(e: ChangeError) -> HttpResponse {
    let refused = match &e {
        ChangeError::Invalid(c) => bad_request(c.key().unwrap_or("limiters"), &e.to_string()),
        ChangeError::Stale { current, .. } => Refused {
            status: StatusCode::PRECONDITION_FAILED,
            title: "Stale version",
            detail: format!(
                "{e}. Fetch GET /v1/config and apply your change to version {current}."
            ),
            extra: json!({ "current_version": current }),
        },
        ChangeError::NotRunning | ChangeError::NoFile => Refused {
            status: StatusCode::SERVICE_UNAVAILABLE,
            title: "Not running",
            detail: e.to_string(),
            extra: Value::Null,
        },
        ChangeError::NotPersisted { path, .. } => Refused {
            status: StatusCode::SERVICE_UNAVAILABLE,
            title: "Not persisted",
            detail: format!("{e}. Nothing was changed; fix the file's directory and retry."),
            extra: json!({ "file": path.display().to_string(), "key": "admin.overrides_file" }),
        },
    };
    refused.response()
}

/// Whether the request says its body is JSON (`application/json` or any `+json` type).
fn is_json(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .is_some_and(|t| t == "application/json" || t.ends_with("+json"))
}

/// Parses a JSON body, naming the offending field.
fn parse<T: DeserializeOwned>(req: &HttpRequest, body: &[u8]) -> Result<T, Refused> {
    if !is_json(req) {
        return Err(Refused {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            title: "Unsupported media type",
            detail: "Send the body as application/json.".into(),
            extra: Value::Null,
        });
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "body".to_owned() } else { path };
        bad_request(&field, &e.into_inner().to_string())
    })?;
    de.end().map_err(|e| bad_request("body", &e.to_string()))?;
    Ok(value)
}

/// Reads (size limit, deadline) and parses a JSON body; the error is the response to send.
/// The token was checked before: an unauthenticated body is never read.
async fn accept<T: DeserializeOwned>(
    req: &HttpRequest,
    payload: web::Payload,
    brownout: &Brownout,
) -> Result<T, Box<HttpResponse>> {
    let deadline = brownout.config().admin.body_timeout.get();
    let body = read_body(req, payload, deadline).await.map_err(Box::new)?;
    parse(req, &body).map_err(|refused| Box::new(refused.response()))
}

fn source(req: &HttpRequest) -> String {
    req.peer_addr()
        .map_or_else(|| "unknown".to_owned(), |a| a.to_string())
}

fn with_etag(mut response: HttpResponse, version: u64) -> HttpResponse {
    if let Ok(value) = HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

/// `PUT /v1/limiters/{name}/mode`
pub(super) async fn put_mode(
    req: HttpRequest,
    name: web::Path<String>,
    payload: web::Payload,
    brownout: web::Data<Brownout>,
) -> HttpResponse {
    let name = name.into_inner();
    let Some(limiter) = LimiterName::parse(&name) else {
        let known: Vec<&str> = LimiterName::ALL.iter().map(|l| l.as_str()).collect();
        return problem(
            StatusCode::NOT_FOUND,
            "Unknown limiter",
            &format!(
                "There is no limiter named `{name}`; the limiters are {}.",
                known.join(", ")
            ),
            Value::Null,
        );
    };
    let body: ModeBody = match accept(&req, payload, &brownout).await {
        Ok(b) => b,
        Err(response) => return *response,
    };
    if let Some(ttl) = body.ttl_seconds {
        if !(1..=MAX_TTL).contains(&ttl) {
            return bad_request("ttl_seconds", "must be between 1 and 604800 (a week)").response();
        }
    }
    let change = Change::Mode {
        limiter,
        mode: body.mode,
        ttl: body.ttl_seconds.map(Duration::from_secs),
    };
    match brownout.change(change, source(&req)).await {
        Ok(applied) => HttpResponse::Ok().json(json!({
            "version": applied.version,
            "limiter": limiter.as_str(),
            "mode": body.mode,
            "ttl_seconds": body.ttl_seconds,
        })),
        Err(e) => change_refused(e),
    }
}

/// `PUT /v1/kill-switch`
pub(super) async fn put_kill_switch(
    req: HttpRequest,
    payload: web::Payload,
    brownout: web::Data<Brownout>,
) -> HttpResponse {
    let body: KillSwitchBody = match accept(&req, payload, &brownout).await {
        Ok(b) => b,
        Err(response) => return *response,
    };
    match brownout
        .change(Change::KillSwitch(body.engaged), source(&req))
        .await
    {
        Ok(applied) => HttpResponse::Ok().json(json!({
            "version": applied.version,
            "engaged": body.engaged,
        })),
        Err(e) => change_refused(e),
    }
}

fn config_response(brownout: &Brownout) -> HttpResponse {
    let (version, kill_switch, limiters) = brownout.limiters_json();
    with_etag(
        HttpResponse::Ok().json(json!({
            "version": version,
            "kill_switch": kill_switch,
            "limiters": limiters,
        })),
        version,
    )
}

/// `GET /v1/config`
pub(super) async fn get_config(brownout: web::Data<Brownout>) -> HttpResponse {
    config_response(&brownout)
}

/// The version named by `If-Match` (`"12"`, `W/"12"` or `12`); `*` or no header: any.
fn if_match(req: &HttpRequest) -> Result<Option<u64>, Refused> {
    let Some(value) = req.headers().get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text == "*" {
        return Ok(None);
    }
    text.trim_start_matches("W/")
        .trim_matches('"')
        .parse()
        .map(Some)
        .map_err(|_| {
            bad_request(
                "If-Match",
                "must be an ETag from GET /v1/config, like \"12\"",
            )
        })
}

/// `PATCH /v1/config`
pub(super) async fn patch_config(
    req: HttpRequest,
    payload: web::Payload,
    brownout: web::Data<Brownout>,
) -> HttpResponse {
    let patch: Value = match accept(&req, payload, &brownout).await {
        Ok(p) => p,
        Err(response) => return *response,
    };
    if !patch.is_object() {
        return bad_request(
            "body",
            "must be a JSON object: a merge patch (RFC 7396) of the document GET /v1/config returns",
        )
        .response();
    }
    let expected = match if_match(&req) {
        Ok(v) => v,
        Err(refused) => return refused.response(),
    };
    let change = Change::Patch {
        patch,
        if_match: expected,
    };
    match brownout.change(change, source(&req)).await {
        Ok(_) => config_response(&brownout),
        Err(e) => change_refused(e),
    }
}

/// `GET /v1/audit`
pub(super) async fn get_audit(brownout: web::Data<Brownout>) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "entries": brownout.audit() }))
}
