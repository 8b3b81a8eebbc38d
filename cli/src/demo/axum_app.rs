//! The demo on axum (`demo.framework: axum`): the same routes, worker pool and answers as on
//! actix, behind brownout's tower layer inside the router (each route's service time learned
//! by its matched path), on a multi-threaded tokio runtime of its own with as many threads as
//! actix starts workers.

use super::{answer, WorkerPool};
use crate::config::Route;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use brownout::Brownout;
use std::net::SocketAddr;
use tokio::sync::oneshot;

/// The running axum app: its runtime's thread, and the signal that stops it gracefully.
pub(super) struct AxumApp {
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl AxumApp {
    /// Stops the server (in-flight requests are answered first) and waits for its thread.
    pub(super) async fn stop(self) {
        let _ = self.stop.send(());
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}

/// Binds `bind` and serves the demo's routes there behind `brownout`'s layer; where it
/// listens.
pub(super) fn start(
    brownout: &Brownout,
    pool: WorkerPool,
    bind: &str,
) -> std::io::Result<(SocketAddr, AxumApp)> {
    let listener = std::net::TcpListener::bind(bind)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("demo-axum")
        .enable_all()
        .build()?;
    let app = router(pool).layer(brownout.layer());
    let (stop, stopped) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("demo-axum".into())
        .spawn(move || {
            runtime.block_on(async move {
                let served = match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => {
                        axum::serve(
                            listener,
                            app.into_make_service_with_connect_info::<SocketAddr>(),
                        )
                        .with_graceful_shutdown(async {
                            let _ = stopped.await;
                        })
                        .await
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = served {
                    tracing::error!("demo app (axum): {e}");
                }
            });
        })?;
    Ok((addr, AxumApp { stop, thread }))
}

/// The demo's routes, as `demo::routes` registers them on actix.
fn router(pool: WorkerPool) -> Router {
    Router::new()
        .route(
            "/v1/items",
            get(|pool| served(pool, Route::GetItems)).post(|pool| served(pool, Route::PostItems)),
        )
        .route("/v1/items/{id}", get(get_item))
        .route(
            "/v1/charges",
            axum::routing::post(|pool| served(pool, Route::Charges)),
        )
        .route("/v1/reports", get(|pool| served(pool, Route::Reports)))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(pool)
}

async fn get_item(pool: State<WorkerPool>, Path(id): Path<String>) -> Response {
    pool.work(Route::GetItem).await;
    json(answer(Route::GetItem, &id))
}

/// `route`'s answer, after its work.
async fn served(State(pool): State<WorkerPool>, route: Route) -> Response {
    pool.work(route).await;
    json(answer(route, ""))
}

fn json((status, body): (u16, serde_json::Value)) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
