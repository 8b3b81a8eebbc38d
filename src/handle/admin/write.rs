//! The admin API's write side: modes, kill switch, config GET/PATCH with ETag and If-Match,
//! and the audit log. Bad input is refused with a problem+json body naming the field;
//! nothing changes.

use super::error::AdminError;
use super::gate::read_body;
use crate::config::describe_json;
use crate::config::Mode;
use crate::handle::Brownout;
use crate::limiter::LimiterName;
use crate::ops::Change;
use actix_web::http::header::{self, HeaderValue};
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
    /// Signed, so that a negative one is refused by the range check in words.
    #[serde(default)]
    ttl_seconds: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KillSwitchBody {
    engaged: bool,
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
fn parse<T: DeserializeOwned>(req: &HttpRequest, body: &[u8]) -> Result<T, AdminError> {
    if !is_json(req) {
        return Err(AdminError::UnsupportedMediaType);
    }
    let document: Value = serde_json::from_slice(body)
        .map_err(|e| AdminError::invalid("body", describe_json(&e.to_string())))?;
    // Every body is an object: serde would read `[true]` as `{"engaged": true}`.
    if !document.is_object() {
        return Err(AdminError::invalid(
            "body",
            "must be a JSON object (for PATCH /v1/config, a merge patch of the document GET /v1/config returns)",
        ));
    }
    serde_path_to_error::deserialize(&document).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "body".to_owned() } else { path };
        AdminError::invalid(field, describe_json(&e.into_inner().to_string()))
    })
}

/// Reads (size limit, deadline) and parses a JSON body. The token was checked before: an
/// unauthenticated body is never read.
async fn accept<T: DeserializeOwned>(
    req: &HttpRequest,
    payload: web::Payload,
    brownout: &Brownout,
) -> Result<T, AdminError> {
    let deadline = brownout.config().admin.body_timeout.get();
    let body = read_body(req, payload, deadline).await?;
    parse(req, &body)
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
) -> Result<HttpResponse, AdminError> {
    let name = name.into_inner();
    let limiter = LimiterName::parse(&name).ok_or(AdminError::UnknownLimiter(name))?;
    let body: ModeBody = accept(&req, payload, &brownout).await?;
    let ttl = match body.ttl_seconds {
        Some(ttl) => match u64::try_from(ttl)
            .ok()
            .filter(|t| (1..=MAX_TTL).contains(t))
        {
            Some(ttl) => Some(Duration::from_secs(ttl)),
            None => {
                return Err(AdminError::invalid(
                    "ttl_seconds",
                    format!("must be between 1 and {MAX_TTL} (a week), not {ttl}"),
                ))
            }
        },
        None => None,
    };
    let change = Change::Mode {
        limiter,
        mode: body.mode,
        ttl,
    };
    let applied = brownout.change(change, source(&req)).await?;
    Ok(HttpResponse::Ok().json(json!({
        "version": applied.version,
        "scope": scope(applied),
        "limiter": limiter.as_str(),
        "mode": body.mode,
        "ttl_seconds": body.ttl_seconds,
    })))
}

/// `PUT /v1/kill-switch`
pub(super) async fn put_kill_switch(
    req: HttpRequest,
    payload: web::Payload,
    brownout: web::Data<Brownout>,
) -> Result<HttpResponse, AdminError> {
    let body: KillSwitchBody = accept(&req, payload, &brownout).await?;
    let applied = brownout
        .change(Change::KillSwitch(body.engaged), source(&req))
        .await?;
    Ok(HttpResponse::Ok().json(json!({
        "version": applied.version,
        "scope": scope(applied),
        "engaged": body.engaged,
    })))
}

/// Whether a change reached the fleet (`fleet`) or this instance only (`local`).
fn scope(applied: crate::ops::Applied) -> &'static str {
    if applied.fleet {
        "fleet"
    } else {
        "local"
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

/// The version `If-Match` asks for (`"12"`, `W/"12"` or `12`, or a list of them: any of them
/// matches, as RFC 9110 says); `*` or no header: any. With a list, the one the settings are at
/// now (`current`), else the first: the operator checks it again when it applies the patch.
fn if_match(req: &HttpRequest, current: u64) -> Result<Option<u64>, AdminError> {
    let Some(value) = req.headers().get(header::IF_MATCH) else {
        return Ok(None);
    };
    let refused = || {
        AdminError::invalid(
            "If-Match",
            "must be an ETag from GET /v1/config, like \"12\" (or a list of them)",
        )
    };
    let text = value.to_str().map_err(|_| refused())?;
    let mut versions = Vec::new();
    for tag in text.split(',').map(str::trim) {
        if tag == "*" {
            return Ok(None);
        }
        let version = tag
            .trim_start_matches("W/")
            .trim_matches('"')
            .parse::<u64>()
            .map_err(|_| refused())?;
        versions.push(version);
    }
    let first = versions.first().copied().ok_or_else(refused)?;
    Ok(Some(if versions.contains(&current) {
        current
    } else {
        first
    }))
}

/// `PATCH /v1/config`
pub(super) async fn patch_config(
    req: HttpRequest,
    payload: web::Payload,
    brownout: web::Data<Brownout>,
) -> Result<HttpResponse, AdminError> {
    // An object, as every body (`parse`): a merge patch (RFC 7396) of GET /v1/config's document.
    let patch: Value = accept(&req, payload, &brownout).await?;
    let change = Change::Patch {
        patch,
        if_match: if_match(&req, brownout.settings().version)?,
    };
    brownout.change(change, source(&req)).await?;
    Ok(config_response(&brownout))
}

/// `GET /v1/audit`
pub(super) async fn get_audit(brownout: web::Data<Brownout>) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "entries": brownout.audit() }))
}
