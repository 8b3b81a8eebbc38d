//! The demo app of `cargo run --release`: three routes behind brownout, each holding one slot
//! of a small worker pool for `demo.service_time`, so load above `workers / service_time`
//! really overloads it and the worker-utilization controller has something to react to.

mod alternative;

use crate::config::Config;
use crate::runtime::{Brownout, Error};
use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpResponse, HttpServer};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The simulated workers.
#[derive(Debug, Clone)]
pub struct WorkerPool {
    slots: Arc<Semaphore>,
    /// Nanoseconds a request holds a slot: changed at run time by [`Demo::set_service_time`].
    service_time: Arc<std::sync::atomic::AtomicU64>,
}

impl WorkerPool {
    /// `workers` slots, each held for `service_time` per request.
    pub fn new(workers: u32, service_time: Duration) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(workers as usize)),
            service_time: Arc::new(std::sync::atomic::AtomicU64::new(nanos(service_time))),
        }
    }

    async fn work(&self) {
        // The semaphore is never closed, so acquiring only waits.
        if let Ok(_slot) = self.slots.acquire().await {
            let ns = self.service_time.load(std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_nanos(ns)).await;
        }
    }
}

async fn list_items(pool: web::Data<WorkerPool>) -> HttpResponse {
    pool.work().await;
    HttpResponse::Ok().json(json!({"items": [{"id": "item_1"}, {"id": "item_2"}]}))
}

async fn create_item(pool: web::Data<WorkerPool>) -> HttpResponse {
    pool.work().await;
    HttpResponse::Created().json(json!({"id": "item_3"}))
}

async fn create_charge(pool: web::Data<WorkerPool>) -> HttpResponse {
    pool.work().await;
    HttpResponse::Created().json(json!({"id": "ch_1", "status": "succeeded"}))
}

/// Registers the demo routes.
pub fn routes(pool: WorkerPool) -> impl Fn(&mut web::ServiceConfig) + Clone {
    move |cfg| {
        cfg.app_data(web::Data::new(pool.clone()))
            .route("/v1/items", web::get().to(list_items))
            .route("/v1/items", web::post().to(create_item))
            .route("/v1/charges", web::post().to(create_charge));
    }
}

/// The running demo: both servers and the brownout handle.
pub struct Demo {
    /// The brownout instance embedded in the app.
    pub brownout: Brownout,
    /// Where the demo app listens.
    pub app_addr: SocketAddr,
    /// Where the admin API listens.
    pub admin_addr: SocketAddr,
    pool: WorkerPool,
    app: ServerHandle,
    admin: ServerHandle,
}

impl Demo {
    /// Builds brownout from `config`, starts its actors, the admin server and the demo app.
    /// Must run inside an actix system.
    pub fn start(config: Config) -> Result<Self, Error> {
        Self::start_with_file(config, None)
    }

    /// Like [`start`](Self::start), for a `config` read from `file` (which SIGHUP reloads).
    pub fn start_with_file(config: Config, file: Option<&std::path::Path>) -> Result<Self, Error> {
        let pool = WorkerPool::new(config.demo.workers, config.demo.service_time.get());
        let mut builder = Brownout::builder(config.clone());
        if let Some(file) = file {
            builder = builder.config_file(file);
        }
        let gate = alternative::Gate::new(config.demo.alternative_limiter)?;
        let brownout = builder.build()?;
        brownout.start()?;
        let admin = brownout.admin_server()?;
        let b = brownout.clone();
        let pool_handle = pool.clone();
        let app = HttpServer::new(move || {
            App::new()
                .wrap(gate.clone())
                .wrap(b.middleware())
                .configure(routes(pool.clone()))
        })
        .disable_signals()
        .bind(&config.demo.bind)
        .map_err(|e| Error::Admin(format!("demo.bind {}: {e}", config.demo.bind)))?;
        let app_addr = app.addrs()[0];
        let app = app.run();
        let demo = Demo {
            brownout,
            pool: pool_handle,
            app_addr,
            admin_addr: admin.local_addr,
            app: app.handle(),
            admin: admin.server.handle(),
        };
        actix_web::rt::spawn(app);
        actix_web::rt::spawn(admin.server);
        tracing::info!("demo app listening on http://{app_addr}");
        tracing::info!("admin API listening on http://{}", demo.admin_addr);
        Ok(demo)
    }

    /// Changes how long each request holds a worker, from now on: a capacity drop (or its
    /// end) for the overload scorecard. The binary does this on SIGUSR1 (twice the configured
    /// service time) and SIGUSR2 (back to it).
    pub fn set_service_time(&self, service_time: Duration) {
        self.pool
            .service_time
            .store(nanos(service_time), std::sync::atomic::Ordering::Relaxed);
    }

    /// Stops both servers gracefully, then the actors.
    ///
    /// # Cancel safety
    /// Dropping the future early leaves the servers and actors stopping on their own.
    pub async fn stop(self) {
        self.app.stop(true).await;
        self.admin.stop(true).await;
        self.brownout.shutdown().await;
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
