//! The admin API, whatever serves it: a request as plain strings and header lookups in, a
//! [`Reply`] out. The actix server (`actix.rs`) and the hyper server and tower service
//! (`hyper.rs`) only translate; the routes, the gate, the bodies and every answer are here, so
//! both servers answer alike.

use super::error::AdminError;
use super::gate::{authorized, is_open};
use super::reply::{AdminRequest, Reply};
use super::{write, MAX_BODY, MAX_HEADERS};
use crate::handle::Brownout;
use crate::limiter::LimiterName;
use std::future::Future;
use std::time::Duration;

/// What an admin request asks for.
enum Endpoint {
    Healthz,
    Metrics,
    State,
    Mode(LimiterName),
    KillSwitch,
    GetConfig,
    PatchConfig,
    Audit,
    Client(String),
}

impl Endpoint {
    /// The endpoint of `method` on `path`: 404 for no such path, 405 for a method the path
    /// does not take.
    fn of(method: &str, path: &str) -> Result<Self, AdminError> {
        let Some(rest) = path.strip_prefix('/') else {
            return Err(AdminError::NotFound);
        };
        // Matched segment by segment, each percent-decoded (`/v1/st%61te` is `/v1/state`, as
        // actix's router reads it; `%2F` stays inside its segment). A segment that does not
        // decode matches no name (`None`).
        let decoded: Vec<Option<String>> = rest.split('/').map(decode).collect();
        let segments: Vec<Option<&str>> = decoded.iter().map(Option::as_deref).collect();
        // The path first, then the method (405 with the methods it takes, in `Allow`), then
        // what the path names.
        let allowing = |allowed: &'static str| {
            if allowed.split(", ").any(|m| m == method) {
                Ok(())
            } else {
                Err(AdminError::MethodNotAllowed(allowed))
            }
        };
        match segments.as_slice() {
            [Some("healthz")] => allowing("GET, HEAD").map(|()| Endpoint::Healthz),
            [Some("metrics")] => allowing("GET, HEAD").map(|()| Endpoint::Metrics),
            [Some("v1"), Some("state")] => allowing("GET").map(|()| Endpoint::State),
            [Some("v1"), Some("kill-switch")] => allowing("PUT").map(|()| Endpoint::KillSwitch),
            [Some("v1"), Some("config")] => {
                allowing("GET, PATCH")?;
                Ok(if method == "GET" {
                    Endpoint::GetConfig
                } else {
                    Endpoint::PatchConfig
                })
            }
            [Some("v1"), Some("audit")] => allowing("GET").map(|()| Endpoint::Audit),
            [Some("v1"), Some("limiters"), name, Some("mode")] if *name != Some("") => {
                allowing("PUT")?;
                let name = name.unwrap_or(rest.split('/').nth(2).unwrap_or_default());
                LimiterName::parse(name)
                    .map(Endpoint::Mode)
                    .ok_or_else(|| AdminError::UnknownLimiter(name.to_owned()))
            }
            [Some("v1"), Some("clients"), key] if *key != Some("") => {
                allowing("GET")?;
                let key = key.ok_or_else(|| {
                    AdminError::invalid("key", "is not percent-encoded UTF-8 text")
                })?;
                Ok(Endpoint::Client(key.to_owned()))
            }
            _ => Err(AdminError::NotFound),
        }
    }

    /// Whether the endpoint reads a request body. (Every endpoint named: a new one is placed
    /// here by the compiler.)
    fn reads_body(&self) -> bool {
        match self {
            Endpoint::Mode(_) | Endpoint::KillSwitch | Endpoint::PatchConfig => true,
            Endpoint::Healthz
            | Endpoint::Metrics
            | Endpoint::State
            | Endpoint::GetConfig
            | Endpoint::Audit
            | Endpoint::Client(_) => false,
        }
    }
}

/// A path segment with its `%XX` escapes decoded (`None`: a broken escape, or not UTF-8).
fn decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Answers `req`. The headers' size and the token are checked before anything else, so an
/// unauthenticated client cannot make the server route, buffer or wait for anything;
/// `read_body` reads at most [`MAX_BODY`] bytes within the deadline it is given, and only for
/// an endpoint that takes a body.
pub(crate) async fn answer<F, Fut>(
    brownout: &Brownout,
    req: &AdminRequest<'_>,
    read_body: F,
) -> Reply
where
    F: FnOnce(Duration) -> Fut,
    Fut: Future<Output = Result<bytes::Bytes, AdminError>>,
{
    match route(brownout, req, read_body).await {
        Ok(reply) => reply,
        Err(refused) => refused.reply(),
    }
}

async fn route<F, Fut>(
    brownout: &Brownout,
    req: &AdminRequest<'_>,
    read_body: F,
) -> Result<Reply, AdminError>
where
    F: FnOnce(Duration) -> Fut,
    Fut: Future<Output = Result<bytes::Bytes, AdminError>>,
{
    // Before the token: a 100 KB Authorization is not compared.
    if req.headers.size() > MAX_HEADERS {
        return Err(AdminError::HeadersTooLarge);
    }
    let token = &brownout.inner.admin_token;
    if !is_open(req.path, brownout) && !authorized(req.headers.get("authorization"), token) {
        return Err(AdminError::Unauthorized);
    }
    let endpoint = Endpoint::of(req.method, req.path)?;
    let body = if endpoint.reads_body() {
        let announced = req
            .headers
            .get("content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if announced.is_some_and(|n| n > MAX_BODY as u64) {
            return Err(AdminError::PayloadTooLarge);
        }
        read_body(brownout.config().admin.body_timeout.get()).await?
    } else {
        bytes::Bytes::new()
    };
    match endpoint {
        Endpoint::Healthz => Ok(Reply::ok("text/plain", "ok")),
        Endpoint::Metrics => Ok(Reply::ok(
            "text/plain; version=0.0.4; charset=utf-8",
            brownout.render_metrics(),
        )),
        Endpoint::State => Ok(Reply::json(&super::state_json(brownout))),
        Endpoint::Mode(limiter) => write::put_mode(brownout, req, limiter, &body).await,
        Endpoint::KillSwitch => write::put_kill_switch(brownout, req, &body).await,
        Endpoint::GetConfig => Ok(write::config_reply(brownout)),
        Endpoint::PatchConfig => write::patch_config(brownout, req, &body).await,
        Endpoint::Audit => Ok(Reply::json(
            &serde_json::json!({ "entries": brownout.audit() }),
        )),
        Endpoint::Client(key) => super::client(brownout, req, key).await,
    }
}
