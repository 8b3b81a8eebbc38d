//! The admin server: its own actix server (default `127.0.0.1:9090`) with health, metrics and
//! state endpoints, and the operator's write side (`write.rs`), behind a bearer token
//! (DESIGN.md §6).

mod write;

use super::response::problem;
use crate::limiter::LimiterName;
use crate::runtime::{Brownout, Error};
use crate::tier::Tier;
use actix_web::dev::Server;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::{json, Value};
use std::net::SocketAddr;
use subtle::ConstantTimeEq;

/// Largest request body the admin server reads.
pub const MAX_BODY: usize = 64 * 1024;

/// A bound, not yet awaited admin server.
pub struct AdminServer {
    /// The server future; spawn or await it.
    pub server: Server,
    /// Where it listens (useful when bound to port 0).
    pub local_addr: SocketAddr,
}

impl Brownout {
    /// Binds the admin server to `admin.bind`.
    ///
    /// Refuses a non-loopback address unless a token was configured explicitly: a generated
    /// token is only logged, which is fine on one machine, not on a network.
    pub fn admin_server(&self) -> Result<AdminServer, Error> {
        let bind: SocketAddr = self.config().admin.bind.parse().map_err(|_| {
            Error::Admin(format!(
                "admin.bind {:?} is not an address",
                self.config().admin.bind
            ))
        })?;
        self.admin_server_on(bind)
    }

    /// Binds the admin server to `bind` instead of `admin.bind`.
    pub fn admin_server_on(&self, bind: SocketAddr) -> Result<AdminServer, Error> {
        let shared = &self.shared;
        let env = &self.config().admin.token_env;
        if shared.admin_token_generated {
            if !bind.ip().is_loopback() {
                return Err(Error::Admin(format!(
                    "refusing to listen on {bind} with a generated token: set {env} (admin.token_env)"
                )));
            }
            tracing::warn!(
                token = %shared.admin_token,
                "{env} is not set; generated an admin token for this run"
            );
        }
        let brownout = self.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(brownout.clone()))
                .app_data(web::PayloadConfig::new(MAX_BODY))
                .service(resource("/healthz").route(web::get().to(healthz)))
                .service(resource("/metrics").route(web::get().to(metrics)))
                .service(resource("/v1/state").route(web::get().to(state)))
                .service(resource("/v1/limiters/{name}/mode").route(web::put().to(write::put_mode)))
                .service(resource("/v1/kill-switch").route(web::put().to(write::put_kill_switch)))
                .service(
                    resource("/v1/config")
                        .route(web::get().to(write::get_config))
                        .route(web::patch().to(write::patch_config)),
                )
                .service(resource("/v1/audit").route(web::get().to(write::get_audit)))
                .default_service(web::to(not_found))
        })
        .workers(1)
        .disable_signals()
        .bind(bind)
        .map_err(|e| Error::Admin(format!("cannot listen on {bind}: {e}")))?;
        let local_addr = server.addrs()[0];
        Ok(AdminServer {
            server: server.run(),
            local_addr,
        })
    }
}

fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
}

async fn method_not_allowed() -> HttpResponse {
    problem(
        StatusCode::METHOD_NOT_ALLOWED,
        "Method not allowed",
        "This endpoint does not support that method.",
        Value::Null,
    )
}

async fn not_found() -> HttpResponse {
    problem(
        StatusCode::NOT_FOUND,
        "Not found",
        "No such admin endpoint.",
        Value::Null,
    )
}

/// `None` if the request carries the admin token (compared in constant time), else the 401.
pub(crate) fn unauthorized(req: &HttpRequest, brownout: &Brownout) -> Option<HttpResponse> {
    let expected = brownout.shared.admin_token.as_bytes();
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .and_then(|v| v.strip_prefix(b"Bearer "))
        .unwrap_or_default();
    if given.len() == expected.len() && bool::from(given.ct_eq(expected)) {
        return None;
    }
    let mut denied = problem(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "Send the admin token as Authorization: Bearer <token>.",
        Value::Null,
    );
    denied.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"brownout-admin\""),
    );
    Some(denied)
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok")
}

async fn metrics(req: HttpRequest, brownout: web::Data<Brownout>) -> HttpResponse {
    if brownout.config().admin.metrics_auth {
        if let Some(denied) = unauthorized(&req, &brownout) {
            return denied;
        }
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(brownout.render_metrics())
}

async fn state(req: HttpRequest, brownout: web::Data<Brownout>) -> HttpResponse {
    if let Some(denied) = unauthorized(&req, &brownout) {
        return denied;
    }
    HttpResponse::Ok().json(state_json(&brownout))
}

/// The body of `GET /v1/state`.
pub(crate) fn state_json(brownout: &Brownout) -> Value {
    let settings = brownout.settings();
    let plan = brownout.plan();
    let wu = &settings.limiters.worker_utilization;
    let mut limiters = serde_json::to_value(&settings.limiters).unwrap_or(Value::Null);
    for limiter in LimiterName::ALL {
        if let Some(block) = limiters
            .get_mut(limiter.as_str())
            .and_then(Value::as_object_mut)
        {
            let counts = brownout.shared.metrics.counts(limiter);
            block.insert("counters".into(), json!(counts));
        }
    }
    let now = brownout.shared.clock.now();
    json!({
        "version": settings.version,
        "kill_switch": settings.kill_switch,
        "limiters": limiters,
        "controller": {
            "utilization": plan.utilization,
            "amount": plan.amount,
            "resting": crate::control::ControllerParams::from_config(wu).resting(),
            "probability": plan.probability,
            "samples": plan.samples,
            "plan_age_seconds": now.saturating_sub(plan.at).as_secs_f64(),
        },
        "in_flight": brownout.in_flight(),
        "tiers": Tier::ALL.map(Tier::as_str),
    })
}
