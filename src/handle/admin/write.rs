//! The admin API's write side: modes, kill switch, config GET/PATCH with ETag and If-Match,
//! and the audit log. Bad input is refused with a problem+json body naming the field;
//! nothing changes.

use super::error::AdminError;
use super::reply::{AdminRequest, Reply};
use crate::config::describe_json;
use crate::config::Mode;
use crate::handle::Brownout;
use crate::limiter::LimiterName;
use crate::ops::Change;
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
fn is_json(req: &AdminRequest<'_>) -> bool {
    req.headers
        .get("content-type")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .is_some_and(|t| t == "application/json" || t.ends_with("+json"))
}

/// Parses a JSON body, naming the offending field.
fn parse<T: DeserializeOwned>(req: &AdminRequest<'_>, body: &[u8]) -> Result<T, AdminError> {
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

/// `PUT /v1/limiters/{name}/mode`
pub(super) async fn put_mode(
    brownout: &Brownout,
    req: &AdminRequest<'_>,
    limiter: LimiterName,
    body: &[u8],
) -> Result<Reply, AdminError> {
    let body: ModeBody = parse(req, body)?;
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
    let applied = brownout.change(change, req.source()).await?;
    Ok(Reply::json(&json!({
        "version": applied.version,
        "scope": scope(applied),
        "limiter": limiter.as_str(),
        "mode": body.mode,
        "ttl_seconds": body.ttl_seconds,
    })))
}

/// `PUT /v1/kill-switch`
pub(super) async fn put_kill_switch(
    brownout: &Brownout,
    req: &AdminRequest<'_>,
    body: &[u8],
) -> Result<Reply, AdminError> {
    let body: KillSwitchBody = parse(req, body)?;
    let applied = brownout
        .change(Change::KillSwitch(body.engaged), req.source())
        .await?;
    Ok(Reply::json(&json!({
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

/// `GET /v1/config`, and the answer to a `PATCH` of it: the document, its version as the
/// `ETag`.
pub(super) fn config_reply(brownout: &Brownout) -> Reply {
    let (version, kill_switch, limiters) = brownout.limiters_json();
    Reply::json(&json!({
        "version": version,
        "kill_switch": kill_switch,
        "limiters": limiters,
    }))
    .with_etag(version)
}

/// The version `If-Match` asks for (`"12"`, `W/"12"` or `12`, or a list of them: any of them
/// matches, as RFC 9110 says); `*` or no header: any. With a list, the one the settings are at
/// now (`current`), else the first: the operator checks it again when it applies the patch.
fn if_match(req: &AdminRequest<'_>, current: u64) -> Result<Option<u64>, AdminError> {
    let Some(value) = req.headers.get("if-match") else {
        return Ok(None);
    };
    let refused = || {
        AdminError::invalid(
            "If-Match",
            "must be an ETag from GET /v1/config, like \"12\" (or a list of them)",
        )
    };
    let text = std::str::from_utf8(value).map_err(|_| refused())?;
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
    brownout: &Brownout,
    req: &AdminRequest<'_>,
    body: &[u8],
) -> Result<Reply, AdminError> {
    // An object, as every body (`parse`): a merge patch (RFC 7396) of GET /v1/config's document.
    let patch: Value = parse(req, body)?;
    let change = Change::Patch {
        patch,
        if_match: if_match(req, brownout.settings().version)?,
    };
    brownout.change(change, req.source()).await?;
    Ok(config_reply(brownout))
}
