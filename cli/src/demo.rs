//! The demo app of `cargo run --release`: five routes behind brownout (and `GET /healthz`),
//! each holding one slot of a small worker pool for `demo.service_time` (or its own
//! `demo.route_times`), so load above `workers / service_time` really overloads it and the
//! worker-utilization controller has something to react to. With `demo.work: cpu` a request
//! burns its service time as CPU on a thread of its own instead of sleeping: a CPU-bound
//! server, whose capacity is what its cores do. `demo.framework: axum` serves the same routes
//! with axum behind brownout's tower layer (`demo/axum_app.rs`).

#[cfg(feature = "tools")]
mod alternative;
mod axum_app;
mod precise;

use crate::config::{CliConfig, DemoFramework, DemoWork, Route, COLD_SLOWDOWN};
use actix_web::dev::ServerHandle;
use actix_web::{web, HttpResponse, HttpServer};
use brownout::clock::{Clock, SystemClock};
use brownout::config::ConfigError;
use brownout::{Brownout, Error};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The simulated workers.
#[derive(Debug, Clone)]
pub struct WorkerPool {
    slots: Arc<Semaphore>,
    /// Nanoseconds a request of each route holds a slot ([`Route::ALL`] order).
    times: [u64; 5],
    /// How many times slower than that (1, or 2 during a capacity drop): changed at run time
    /// by [`Demo::set_slowdown`].
    slowdown: Arc<std::sync::atomic::AtomicU32>,
    work: DemoWork,
    /// What a sleeping worker sleeps on (`demo.work: sleep`): tokio's own timer wakes a
    /// millisecond late, which made a 10 ms route take 11.2.
    timer: Option<Arc<precise::PreciseTimer>>,
    /// σ of the log-normal each request's time is drawn from (0: its route's time), and the
    /// draws so far (each request mixes the next value: no lock, reproducible per order).
    spread: f64,
    draws: Arc<std::sync::atomic::AtomicU64>,
    workers: u32,
    /// The workers taken away by a capacity drop (`demo.capacity_drop: fewer`).
    taken: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
    /// `demo.cold_start`, the clock it is read on, and when the first request came (the
    /// cold start's start).
    cold: Duration,
    clock: Arc<dyn Clock>,
    first: Arc<std::sync::OnceLock<Duration>>,
}

impl WorkerPool {
    /// `workers` slots, each held per request for its route's time ([`Route::ALL`] order),
    /// spent as `work` says.
    ///
    /// # Errors
    /// `demo.work: cpu` where this thread's CPU time cannot be read (not Linux).
    pub fn new(workers: u32, times: [Duration; 5], work: DemoWork) -> Result<Self, Error> {
        if work == DemoWork::Cpu && thread_cpu().is_none() {
            return Err(Error::Config(ConfigError::invalid(
                "demo.work",
                "cpu needs each thread's CPU time from /proc/thread-self/schedstat (Linux); use sleep here",
            )));
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        Ok(Self {
            slots: Arc::new(Semaphore::new(workers as usize)),
            times: times.map(nanos),
            slowdown: Arc::new(std::sync::atomic::AtomicU32::new(1)),
            work,
            timer: (work == DemoWork::Sleep)
                .then(|| Arc::new(precise::PreciseTimer::start(clock.clone()))),
            spread: 0.0,
            draws: Arc::default(),
            workers,
            taken: Arc::default(),
            cold: Duration::ZERO,
            clock,
            first: Arc::default(),
        })
    }

    /// For `cold` after the first request (on `clock`), every request takes
    /// [`COLD_SLOWDOWN`] times its time.
    pub fn with_cold_start(mut self, cold: Duration, clock: Arc<dyn Clock>) -> Self {
        self.cold = cold;
        self.clock = clock;
        self
    }

    /// How many times slower than configured a request that starts now is: a capacity drop's
    /// factor, times [`COLD_SLOWDOWN`] in the cold start.
    fn slowdown(&self) -> u32 {
        let factor = self.slowdown.load(std::sync::atomic::Ordering::Relaxed);
        if self.cold.is_zero() {
            return factor;
        }
        let now = self.clock.now();
        let first = *self.first.get_or_init(|| now);
        if now.saturating_sub(first) < self.cold {
            factor * COLD_SLOWDOWN
        } else {
            factor
        }
    }

    /// Each request's time drawn from a log-normal of σ `spread` around its route's (mean
    /// kept), the draws starting from `seed`.
    pub fn with_spread(mut self, spread: f64, seed: u64) -> Self {
        self.spread = spread;
        self.draws = Arc::new(std::sync::atomic::AtomicU64::new(seed));
        self
    }

    /// How many times its route's time the next request takes: 1, or a log-normal draw of
    /// mean 1.
    fn spread_factor(&self) -> f64 {
        if self.spread <= 0.0 {
            return 1.0;
        }
        let at = self
            .draws
            .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let z = brownout::rng::normal(
            brownout::rng::unit(brownout::rng::mix(at)),
            brownout::rng::unit(brownout::rng::mix(at.wrapping_add(1))),
        );
        (self.spread * z - self.spread * self.spread / 2.0).exp()
    }

    async fn work(&self, route: Route) {
        // The semaphore is never closed, so acquiring only waits.
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return;
        };
        let factor = self.slowdown();
        let service_time =
            Duration::from_nanos(self.times[route as usize]).mul_f64(self.spread_factor()) * factor;
        match self.work {
            DemoWork::Sleep => {
                match &self.timer {
                    Some(timer) => timer.sleep(service_time).await,
                    None => tokio::time::sleep(service_time).await,
                }
                drop(slot);
            }
            // The slot goes with the work: a handler stopped by its deadline leaves the burn
            // running (a thread cannot be interrupted), and its core stays taken until then.
            DemoWork::Cpu => {
                let _ = tokio::task::spawn_blocking(move || {
                    burn(service_time);
                    drop(slot);
                })
                .await;
            }
        }
    }
}

/// This thread's CPU time so far: the first field of `/proc/thread-self/schedstat` (ns on
/// the CPU), or `None` where there is no such file.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Spins until this thread has used `work` of CPU time (reading it costs CPU too, and counts).
fn burn(work: Duration) {
    let Some(start) = thread_cpu() else {
        return;
    };
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    loop {
        for _ in 0..10_000 {
            x = x.rotate_left(5) ^ x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        }
        std::hint::black_box(x);
        match thread_cpu() {
            Some(now) if now.saturating_sub(start) < work => {}
            _ => break,
        }
    }
}

/// What a demo route answers once its request has had its worker: the status and JSON body,
/// whatever framework serves it (`id`: `GET /v1/items/{id}`'s).
fn answer(route: Route, id: &str) -> (u16, serde_json::Value) {
    match route {
        Route::GetItems => (200, json!({"items": [{"id": "item_1"}, {"id": "item_2"}]})),
        Route::PostItems => (201, json!({"id": "item_3"})),
        Route::Charges => (201, json!({"id": "ch_1", "status": "succeeded"})),
        Route::GetItem => (200, json!({"id": id})),
        Route::Reports => (200, json!({"report": "monthly", "rows": 2})),
    }
}

/// `route`'s answer in actix, after its work.
async fn served(pool: &WorkerPool, route: Route, id: &str) -> HttpResponse {
    pool.work(route).await;
    let (status, body) = answer(route, id);
    let status = actix_web::http::StatusCode::from_u16(status).unwrap_or_default();
    HttpResponse::build(status).json(body)
}

async fn list_items(pool: web::Data<WorkerPool>) -> HttpResponse {
    served(&pool, Route::GetItems, "").await
}

async fn create_item(pool: web::Data<WorkerPool>) -> HttpResponse {
    served(&pool, Route::PostItems, "").await
}

async fn create_charge(pool: web::Data<WorkerPool>) -> HttpResponse {
    served(&pool, Route::Charges, "").await
}

async fn get_item(pool: web::Data<WorkerPool>, id: web::Path<String>) -> HttpResponse {
    served(&pool, Route::GetItem, &id).await
}

async fn report(pool: web::Data<WorkerPool>) -> HttpResponse {
    served(&pool, Route::Reports, "").await
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().body("ok")
}

/// Registers the demo routes.
pub fn routes(pool: WorkerPool) -> impl Fn(&mut web::ServiceConfig) + Clone {
    move |cfg| {
        cfg.app_data(web::Data::new(pool.clone()))
            .route("/v1/items", web::get().to(list_items))
            .route("/v1/items", web::post().to(create_item))
            .route("/v1/items/{id}", web::get().to(get_item))
            .route("/v1/charges", web::post().to(create_charge))
            .route("/v1/reports", web::get().to(report))
            .route("/healthz", web::get().to(healthz));
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
    app: App,
    admin: ServerHandle,
}

/// The demo app's server, to stop it.
enum App {
    Actix(ServerHandle),
    Axum(axum_app::AxumApp),
}

impl Demo {
    /// Builds brownout from `config`, starts its actors, the admin server and the demo app.
    /// Must run inside an actix system.
    ///
    /// # Errors
    /// What [`Brownout::build`](brownout::BrownoutBuilder::build) and
    /// [`Brownout::admin_server`] refuse; a `demo.bind` that cannot be bound.
    pub fn start(config: CliConfig) -> Result<Self, Error> {
        Self::start_with_file(config, None)
    }

    /// Like [`start`](Self::start), for a `config` read from `file` (which SIGHUP reloads).
    ///
    /// # Errors
    /// As for [`start`](Self::start).
    pub fn start_with_file(
        config: CliConfig,
        file: Option<&std::path::Path>,
    ) -> Result<Self, Error> {
        let CliConfig { brownout, demo } = config;
        let pool = WorkerPool::new(demo.workers, demo.times(), demo.work)?
            .with_spread(demo.spread, brownout::rng::os_seed())
            .with_cold_start(demo.cold_start.get(), Arc::new(SystemClock::new()));
        let mut builder = Brownout::builder(brownout);
        if let Some(file) = file {
            builder = builder.config_file(file);
        }
        // The comparison arm's limiter is built with the `tools` feature only (validate()
        // refuses one named without it).
        #[cfg(feature = "tools")]
        let gate = alternative::Gate::new(demo.alternative_limiter)?;
        #[cfg(not(feature = "tools"))]
        let gate = actix_web::middleware::Identity::default();
        let brownout = builder.build()?;
        brownout.start()?;
        let admin = brownout.admin_server()?;
        let bind_error = |e: std::io::Error| Error::Admin(format!("demo.bind {}: {e}", demo.bind));
        let (app_addr, app) = match demo.framework {
            DemoFramework::Actix => {
                let b = brownout.clone();
                let pool = pool.clone();
                let app = HttpServer::new(move || {
                    actix_web::App::new()
                        .wrap(gate.clone())
                        .wrap(b.middleware())
                        .configure(routes(pool.clone()))
                })
                .disable_signals()
                .bind(&demo.bind)
                .map_err(bind_error)?;
                let app_addr = app.addrs()[0];
                let app = app.run();
                let handle = app.handle();
                actix_web::rt::spawn(app);
                (app_addr, App::Actix(handle))
            }
            DemoFramework::Axum => {
                let (addr, app) =
                    axum_app::start(&brownout, pool.clone(), &demo.bind).map_err(bind_error)?;
                (addr, App::Axum(app))
            }
        };
        let demo = Demo {
            brownout,
            pool,
            app_addr,
            admin_addr: admin.local_addr,
            app,
            admin: admin.server.handle(),
        };
        actix_web::rt::spawn(admin.server);
        tracing::info!("demo app listening on http://{app_addr}");
        tracing::info!("admin API listening on http://{}", demo.admin_addr);
        Ok(demo)
    }

    /// Makes every request hold its worker `factor` times as long as configured, from now
    /// on: a capacity drop (or its end) for the overload scorecard. The binary does this on
    /// SIGUSR1 (twice as long) and SIGUSR2 (as configured).
    pub fn set_slowdown(&self, factor: u32) {
        self.pool
            .slowdown
            .store(factor.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// Takes half the workers away (as they free), or gives them back: a capacity drop (or
    /// its end) that leaves every request's time as it was. The binary does this on SIGUSR1
    /// and SIGUSR2 with `demo.capacity_drop: fewer`.
    pub fn set_fewer_workers(&self, fewer: bool) {
        let mut taken = self
            .pool
            .taken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(task) = taken.take() {
            task.abort();
        }
        if fewer {
            let workers = f64::from(self.pool.workers);
            let n = (workers - brownout::simulate::kept_workers(workers, 2.0)) as u32;
            let slots = self.pool.slots.clone();
            *taken = Some(actix_web::rt::spawn(async move {
                // Held until the task is aborted (the drop's end).
                let _held = slots.acquire_many_owned(n).await;
                std::future::pending::<()>().await;
            }));
        }
    }

    /// Stops both servers gracefully, then the actors.
    ///
    /// # Cancel safety
    /// Dropping the future early leaves the servers and actors stopping on their own.
    pub async fn stop(self) {
        match self.app {
            App::Actix(app) => app.stop(true).await,
            App::Axum(app) => app.stop().await,
        }
        self.admin.stop(true).await;
        self.brownout.shutdown().await;
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_draws_log_normal_times_of_the_same_mean() {
        let times = [Duration::from_millis(10); 5];
        let flat = WorkerPool::new(1, times, DemoWork::Sleep).unwrap();
        assert_eq!(flat.spread_factor(), 1.0);
        let pool = WorkerPool::new(1, times, DemoWork::Sleep)
            .unwrap()
            .with_spread(0.5, 7);
        let draws: Vec<f64> = (0..20_000).map(|_| pool.spread_factor()).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 1.0).abs() < 0.02, "{mean}");
        // One in twenty takes twice the mean or more (5.1% for σ 0.5).
        let slow = draws.iter().filter(|&&f| f >= 2.0).count() as f64 / draws.len() as f64;
        assert!((0.04..0.065).contains(&slow), "{slow}");
    }

    #[test]
    fn a_cold_start_slows_every_request_from_the_first_and_a_capacity_drop_with_it() {
        let times = [Duration::from_millis(10); 5];
        let warm = WorkerPool::new(1, times, DemoWork::Sleep).unwrap();
        assert_eq!(warm.slowdown(), 1);
        let clock = Arc::new(brownout::clock::ManualClock::new());
        clock.advance(Duration::from_secs(100));
        let cold = WorkerPool::new(1, times, DemoWork::Sleep)
            .unwrap()
            .with_cold_start(Duration::from_secs(60), clock.clone());
        assert!(
            cold.first.get().is_none(),
            "it starts with the first request"
        );
        assert_eq!(cold.slowdown(), COLD_SLOWDOWN);
        clock.advance(Duration::from_secs(59));
        cold.slowdown.store(2, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            cold.slowdown(),
            2 * COLD_SLOWDOWN,
            "a drop in the cold start"
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(cold.slowdown(), 2, "a minute after the first request, warm");
    }

    #[test]
    fn a_cpu_request_burns_its_service_time_on_its_own_thread() {
        let before = thread_cpu().expect("Linux: /proc/thread-self/schedstat");
        burn(Duration::from_millis(20));
        let used = thread_cpu().expect("still there") - before;
        assert!(used >= Duration::from_millis(20), "{used:?}");
    }
}
