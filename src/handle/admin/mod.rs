//! The admin API (default `127.0.0.1:9090`): health, metrics and state endpoints, and the
//! operator's write side (`write.rs`), behind a bearer token (docs/admin-api.md). One
//! implementation (`route.rs`), served by actix (`actix.rs`, feature `actix`) or by hyper
//! and as a tower service (`hyper.rs`, feature `tower`).

#[cfg(feature = "actix")]
mod actix;
mod error;
mod gate;
#[cfg(feature = "tower")]
mod hyper;
mod reply;
mod route;
mod write;

#[cfg(feature = "actix")]
pub use actix::AdminServer;
pub use error::AdminError;
#[cfg(feature = "tower")]
pub use hyper::{AdminFuture, AdminServerFuture, AdminService, HyperAdminServer};

use super::{Brownout, Error};
use crate::config::Mode;
use crate::limiter::LimiterName;
use crate::tier::Tier;
use reply::{AdminRequest, Reply};
use serde_json::{json, Value};
use std::net::SocketAddr;

/// Shortest admin token accepted on a non-loopback address.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// Largest request body the admin server reads.
pub const MAX_BODY: usize = 64 * 1024;

/// Most bytes of header names and values an admin request may carry (actix's own limit on a
/// request's head is 128 KiB, and fixed): an admin client sends a token and a few headers.
pub const MAX_HEADERS: usize = 16 * 1024;

impl Brownout {
    /// `admin.bind` as an address.
    fn admin_bind(&self) -> Result<SocketAddr, Error> {
        self.config().admin.bind.parse().map_err(|_| {
            Error::Admin(format!(
                "admin.bind {:?} is not an address",
                self.config().admin.bind
            ))
        })
    }

    /// Refuses a token that is not safe on `bind`, and hands a generated one to the operator.
    fn check_admin_token(&self, bind: SocketAddr) -> Result<(), Error> {
        let inner = &self.inner;
        let admin = &self.config().admin;
        let env = &admin.token_env;
        if inner.admin_token_generated {
            if !bind.ip().is_loopback() {
                return Err(Error::Admin(format!(
                    "refusing to listen on {bind} with a generated token: set {env} (admin.token_env)"
                )));
            }
            return self.hand_out_token();
        }
        if inner.admin_token.len() < MIN_TOKEN_LEN {
            let problem = format!(
                "the admin token (from {env}, admin.token_env) is {} characters long; use at least {MIN_TOKEN_LEN}",
                inner.admin_token.len()
            );
            if !bind.ip().is_loopback() {
                return Err(Error::Admin(format!(
                    "refusing to listen on {bind}: {problem}"
                )));
            }
            crate::logging::notice(crate::logging::Level::Warn, &problem);
        }
        Ok(())
    }

    /// Writes the generated token to `admin.token_file` (0600), or prints it to stderr.
    fn hand_out_token(&self) -> Result<(), Error> {
        let admin = &self.config().admin;
        let token = &self.inner.admin_token;
        match &admin.token_file {
            Some(path) => {
                write_secret(path, token).map_err(|e| {
                    Error::Admin(format!(
                        "admin.token_file: cannot write {}: {e}",
                        path.display()
                    ))
                })?;
                eprintln!(
                    "brownout: {} is not set; the generated admin token is in {}",
                    admin.token_env,
                    path.display()
                );
            }
            None => eprintln!(
                "brownout: {} is not set; admin token for this run: {token}",
                admin.token_env
            ),
        }
        Ok(())
    }
}

/// Writes `secret` to `path`, readable by its owner only.
fn write_secret(path: &std::path::Path, secret: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        let mut file = options.open(path)?;
        // An existing file keeps its mode on open: tighten it.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(secret.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()
    }
    #[cfg(not(unix))]
    {
        let mut file = options.open(path)?;
        file.write_all(secret.as_bytes())?;
        file.sync_all()
    }
}

/// `GET /v1/clients/{key}[?plan=NAME]`: the per-client limits of the client whose API key
/// (as sent after `Bearer `) is `key`, read without spending any of them.
async fn client(
    brownout: &Brownout,
    req: &AdminRequest<'_>,
    key: String,
) -> Result<Reply, AdminError> {
    if key.is_empty() || key.len() > 256 || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(AdminError::invalid(
            "key",
            "must be an API key as clients send it: 1 to 256 visible ASCII characters",
        ));
    }
    let mut plan = None;
    for pair in req.query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("plan", name)) if plan.is_some() => {
                return Err(AdminError::invalid(
                    "query",
                    format!(
                        "names plan twice (plan={} and plan={name}); name one",
                        plan.unwrap_or_default()
                    ),
                ))
            }
            Some(("plan", name)) if !name.is_empty() && name.len() <= 64 => plan = Some(name),
            _ => {
                return Err(AdminError::invalid(
                    "query",
                    format!("the only parameter is plan=NAME (got {pair:?})"),
                ))
            }
        }
    }
    let authorization = format!("Bearer {key}");
    let facts = crate::classify::RequestFacts {
        method: "GET",
        path: "/",
        authorization: Some(authorization.as_bytes()),
        ..Default::default()
    };
    let state = brownout
        .read_client(&facts, plan)
        .await
        .map_err(|e| AdminError::NotReadable(e.to_string()))?;
    Ok(Reply::json(&state))
}

/// Whether the controller's plan drops requests, and if not, why, in plain words: the
/// controller keeps sampling and publishing a plan (its amount and probabilities move) even
/// when nothing enforces it.
fn controller_effect(kill_switch: bool, mode: Mode) -> (bool, Option<&'static str>) {
    let note = match (kill_switch, mode) {
        (true, _) => "the kill switch is engaged: the controller runs, but nothing is shed",
        (false, Mode::Dark) => {
            "worker_utilization is dark: the controller runs and would-be drops are only counted"
        }
        (false, Mode::Off) => {
            "worker_utilization is off: the controller is at rest, and starts from rest when turned back on"
        }
        (false, Mode::Enforce) => return (true, None),
    };
    (false, Some(note))
}

/// adaptive_concurrency's learned state: the limit it admits under and what it holds.
fn adaptive_json(brownout: &Brownout) -> Value {
    let state = &brownout.engine().adaptive();
    json!({
        "limit": state.limit(),
        // While the controller sheds: what the lower tiers are let in under.
        "lane": Some(state.lane()).filter(|l| l.is_finite()),
        "in_flight": state.in_flight(),
        "waiting": state.waiting(),
        "critical_share": state.critical_share(),
        "floor_seconds": state.floor().map(|f| f.as_secs_f64()),
        "service_time_seconds": Tier::ALL.map(|t| state.floors()[t.index()].map(|f| f.as_secs_f64())),
        "route_classes": state.class_floors().map(|(class, floor)| json!({
            "id": class.route(),
            "route": state.routes().name(class.route()),
            "tier": class.tier(),
            "service_time_seconds": floor.as_secs_f64(),
        })).collect::<Vec<_>>(),
    })
}

/// The capacity worker_utilization reads demand against: pinned, or learned (and until then
/// the most the app was seen to serve at once).
fn capacity_json(brownout: &Brownout) -> Value {
    let state = brownout.engine().adaptive();
    let pinned = brownout.settings().limiters.worker_utilization.capacity;
    let (requests, source) = match (pinned, state.capacity()) {
        (Some(c), _) => (Some(f64::from(c)), "pinned"),
        (None, Some(c)) => (Some(c), "learned"),
        (None, None) => (None, "learning"),
    };
    json!({
        "requests": requests,
        "source": source,
        "learned": state.capacity(),
        "at_least": state.capacity_at_least(),
    })
}

/// Where keyed limiter state lives, and in fleet mode whether Redis is in use right now.
fn store_json(brownout: &Brownout) -> Value {
    if let Some(store) = brownout.engine().keyed().shared_status() {
        return json!({
            "kind": "redis",
            "connected": store.connected,
            "breaker": store.breaker,
            "limits": match (store.local_first, store.in_use) {
                (true, _) => "local_first",
                (false, true) => "shared",
                (false, false) => "local",
            },
        });
    }
    json!({"kind": "memory"})
}

/// Where this instance's settings come from: `{scope, instance, fleet_version, in_sync,
/// connected, local_changes, refused}`.
fn settings_json(brownout: &Brownout) -> Value {
    let status = brownout.fleet_status();
    json!({
        "scope": status.scope,
        "instance": status.instance,
        "fleet_version": status.fleet_version,
        "in_sync": status.in_sync(),
        "connected": status.connected,
        "local_changes": status.local_changes,
        "refused": status.refused.as_ref().map(|(version, error)| json!({"version": version, "error": error})),
        "overrides_file": brownout.config().admin.overrides_file,
        "restored": &brownout.inner.restored,
    })
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
            let counts = brownout.engine().metrics().counts(limiter);
            block.insert("counters".into(), json!(counts));
        }
    }
    let now = brownout.engine().clock().now();
    let (enforced, note) = controller_effect(settings.kill_switch, wu.mode);
    json!({
        "version": settings.version,
        "kill_switch": settings.kill_switch,
        "limiters": limiters,
        "controller": {
            "utilization": plan.utilization,
            "demand": plan.demand,
            "capacity": capacity_json(brownout),
            "enforced": enforced,
            "note": note,
            "amount": plan.amount,
            "resting": wu.controller().resting(),
            "probability": plan.probability,
            "samples": plan.samples,
            "plan_age_seconds": now.saturating_sub(plan.at).as_secs_f64(),
        },
        "adaptive_concurrency": adaptive_json(brownout),
        "store": store_json(brownout),
        "settings": settings_json(brownout),
        "in_flight": brownout.in_flight(),
        "tiers": Tier::ALL.map(Tier::as_str),
    })
}
