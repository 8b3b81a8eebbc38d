//! # brownout
//!
//! Keep an actix-web, axum or tonic service up under abuse and overload: Stripe's four production limiters
//! and a fast guard, in one middleware, with an admin HTTP API, Prometheus metrics, and Redis
//! as the shared store of a fleet.
//!
//! | limiter | protects against | answers |
//! |---|---|---|
//! | `request_rate` | one client sending too much (a token bucket per key, weighted endpoint costs, quotas, a per-IP ceiling) | 429 |
//! | `concurrent_requests` | one client holding too many requests open | 429 |
//! | `fleet_usage` | non-critical traffic eating the capacity critical traffic needs | 503 |
//! | `adaptive_concurrency` (the fast guard) | a load step or a capacity drop, within about a second: a limit on requests in flight learned from their latency, refusing test, then GET, then POST traffic | 503 |
//! | `worker_utilization` | the server overloaded: a derivative controller slowly sheds test traffic, then GETs, then POSTs, never critical requests, and slowly brings them back | 503 |
//!
//! Each runs `enforce`, `dark` (counts what it would refuse, lets it through) or `off`, and
//! brownout never fails a request because of itself: a limiter that errors or panics lets it
//! through, counted in `brownout_fail_open_total`. The capacity the overload limiters protect
//! is learned from what the app serves: the defaults protect without tuning.
//!
//! ## Quick start
//!
//! ```no_run
//! use actix_web::{web, App, HttpServer};
//! use brownout::{Brownout, Config};
//!
//! # #[actix_web::main]
//! # async fn main() -> Result<(), brownout::Report> {
//! let config = Config::builder()
//!     .rate_limit(20.0, 100) // 20 credits a second per API key, bursts of 100
//!     .route_cost("POST /v1/charges", 5) // a charge costs 5
//!     .build()?; // validated as a file would be
//! let brownout = Brownout::builder(config).build()?;
//! brownout.start()?; // the sampler, the controller, the operator
//! let b = brownout.clone();
//! HttpServer::new(move || App::new().wrap(b.middleware()).route("/", web::get().to(|| async { "hi" })))
//!     .bind("127.0.0.1:8080")?
//!     .run()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! With a file: [`Brownout::from_config_file`] (the package's `config.yaml` documents every
//! key), or [`Config::load`] and [`Brownout::builder`] for hooks such as
//! [`BrownoutBuilder::key_hook`]. The admin API: `Brownout::admin_server` (on actix), or
//! `Brownout::admin_server_hyper` (feature `tower`). axum, tonic and hyper apps: `Brownout::layer`
//! (feature `tower`). Outside any server: [`Brownout::check`] and [`Decision`].
//!
//! ## Features
//!
//! | feature | adds |
//! |---|---|
//! | `actix` (default) | `Brownout::middleware` for actix-web apps, and `Brownout::admin_server`, the admin API on an actix server |
//! | `tower` | `Brownout::layer`, the same limiters behind a tower `Layer` for `http` 1 services, and `Brownout::admin_server_hyper` and `Brownout::admin_service`, the admin API without actix |
//! | `axum` | `tower`, with axum's `MatchedPath` as the route class and its `ConnectInfo` as the peer |
//! | `tonic` | `tower`, with tonic's `TcpConnectInfo` as the peer |
//! | `redis` | fleet mode: `store.kind: redis` (per-client limits and the fleet reserve shared through Redis, standalone or Cluster) and fleet-wide settings (`admin.scope: fleet`) |
//! | `cpu` | the `cpu` utilization source (this process's CPU time, through sysinfo) |
//! | `simulate` | `brownout::simulate`: the controller and the fast guard against a model of a server in virtual time, to check a configuration in a test |
//!
//! Only `actix` is on by default; an axum or tonic app sets `default-features = false,
//! features = ["axum"]` (or `"tonic"`) and builds no actix crate. The engine, the in-memory
//! store, the admin API's implementation and the metrics are always there.
//!
//! ## How it is built
//!
//! The request path reads the settings ([`Settings`], swapped whole by one operator actor that
//! validates, audits and persists every change, [`ops`]) and the published shed plan without
//! locks, keeps per-key state in a lock-free table ([`store`]), and allocates nothing when it
//! lets a request through. Time ([`clock::Clock`]) and randomness are injected, so every
//! limiter and the controller are tested deterministically. The repository's
//! `docs/ARCHITECTURE.md` has the map; its `README.md` the demo, the admin API and the
//! operator's guide.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// With no front door at all (neither `actix` nor `tower`: the engine alone, through
// `Brownout::check`), the request path's and the admin API's machinery is built but unused.
#![cfg_attr(
    not(any(feature = "actix", feature = "tower")),
    allow(dead_code, unused_imports)
)]

mod actors;
pub mod classify;
pub mod clock;
pub mod config;
pub mod control;
mod engine;
mod handle;
pub mod hook;
pub mod http;
pub mod limiter;
mod logging;
pub(crate) mod math;
pub mod metrics;
pub mod ops;
pub mod rng;
pub mod route_class;
mod schema;
mod shard;
#[cfg(feature = "simulate")]
pub mod simulate;
pub mod store;
pub mod tier;
#[cfg(feature = "tower")]
pub mod tower;

pub use classify::ClientKey;
pub use config::{Config, ConfigBuilder, Mode};
pub use control::{ShedPlan, UtilizationSource};
#[cfg(feature = "actix")]
pub use handle::AdminServer;
#[cfg(feature = "tower")]
pub use handle::{AdminFuture, AdminServerFuture, AdminService, HyperAdminServer};
pub use handle::{
    Admitted, Brownout, BrownoutBuilder, BucketState, ClientState, Decision, Error, InFlightState,
    KeyHook, PlanHook, QuotaState, Report, Settings, TierHook,
};
pub use hook::HookRequest;
pub use tier::Tier;
