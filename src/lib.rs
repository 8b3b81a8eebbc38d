//! # brownout
//!
//! Stripe's four limiters for an actix-web service, and a fast guard, in one middleware:
//!
//! 1. **request_rate** — a per-key token bucket with weighted endpoint costs (429);
//! 2. **concurrent_requests** — a per-key cap on requests in progress (429);
//! 3. **fleet_usage** — capacity reserved for critical traffic (503);
//! 4. **adaptive_concurrency** — a limit on non-critical requests in flight learned from
//!    their latency, refusing in tier order within about a second of a step (503);
//! 5. **worker_utilization** — a derivative controller that slowly sheds test traffic, then
//!    GETs, then POSTs, never critical requests, and slowly brings them back (503).
//!
//! ## Architecture
//!
//! ```text
//! config.yaml ─► Config (validated) ─► ArcSwap<Settings> ◄── operator actor ◄── admin API, SIGHUP
//! request ─► middleware ─► classifier (tier, key) ─► limiter chain ─► app or 429/503
//!                                                      │        ▲
//!                                          store (keyed state)  │
//! sampler actor ─(every sample_interval)─► controller actor ─► published shed plan (atomics)
//! ```
//!
//! The request path reads the settings through `ArcSwap` and the shed plan through plain
//! atomic loads (no locks), keeps per-key state in a lock-free table ([`store`]), allocates
//! nothing when it lets a request through, and never fails a request because of brownout: a
//! limiter that errors or panics fails open, is counted in `brownout_fail_open_total` and is
//! logged at most every ten seconds. Changes at run time ([`ops`]) go through one operator
//! actor that validates, swaps, audits and persists them. Time ([`clock::Clock`]) and
//! randomness (seeds) are injected, so every limiter and the controller are tested
//! deterministically.
//!
//! ## Embedding
//!
//! ```no_run
//! # use actix_web::{web, App, HttpServer};
//! # #[actix_web::main]
//! # async fn main() -> Result<(), brownout::Report> {
//! let brownout = brownout::Brownout::from_config_file("config.yaml")?;
//! brownout.start()?;
//! let b = brownout.clone();
//! HttpServer::new(move || App::new().wrap(b.middleware()).route("/", web::get().to(|| async { "ok" })))
//!     .bind("127.0.0.1:8080")?
//!     .run()
//!     .await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod actors;
pub mod classify;
pub mod clock;
pub mod config;
pub mod control;
mod engine;
mod handle;
pub mod http;
pub mod limiter;
mod logging;
pub(crate) mod math;
pub mod metrics;
pub mod ops;
pub mod rng;
mod schema;
mod shard;
#[cfg(feature = "simulate")]
pub mod simulate;
pub mod store;
pub mod tier;

pub use classify::ClientKey;
pub use config::{Config, ConfigBuilder, Mode};
pub use control::{ShedPlan, UtilizationSource};
pub use handle::{
    AdminServer, Admitted, Brownout, BrownoutBuilder, BucketState, ClientState, Decision, Error,
    InFlightState, KeyHook, PlanHook, Report, Settings, TierHook,
};
pub use tier::Tier;
