//! brownout in an axum app: the same limiters, admin API and metrics as the actix middleware,
//! behind a tower layer: an app with `default-features = false, features = ["axum"]` builds no
//! actix crate (`cargo tree -e normal`; building this example here also builds the
//! repository's dev-dependencies). Ctrl-C stops it.
//! `cargo run --example axum --no-default-features --features axum -- 127.0.0.1:8080`, then
//! `curl -i localhost:8080/v1/charges -X POST`; the admin API (its token is printed at start)
//! is on `127.0.0.1:9090`: `curl -H "Authorization: Bearer $TOKEN" localhost:9090/v1/state`.

use axum::routing::{get, post};
use axum::Router;
use brownout::{Brownout, Config};
use std::net::SocketAddr;

#[tokio::main]
async fn main() -> Result<(), brownout::Report> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let config = Config::builder()
        .rate_limit(20.0, 100)
        .route_cost("POST /v1/charges", 5)
        .critical_route("POST /v1/charges")
        .build()?;
    let brownout = Brownout::builder(config).build()?;
    brownout.start()?;
    // The admin API and /metrics on admin.bind (127.0.0.1:9090), served by hyper.
    let admin = brownout.admin_server_hyper()?;
    println!("admin API on http://{}", admin.local_addr);
    tokio::spawn(admin.server);

    let app = Router::new()
        .route("/v1/charges", post(|| async { "charged" }))
        .route("/", get(|| async { "hi" }))
        // Inside the router: each route's service time is learned by its MatchedPath.
        .layer(brownout.layer());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    brownout.shutdown().await;
    Ok(())
}
