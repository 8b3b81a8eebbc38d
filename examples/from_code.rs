//! brownout configured from code, no YAML file: a per-key rate limit with a weighted route
//! beside the default overload protection (the README's "Quick start, no file"). Built by
//! the test suite; `tests/embed.rs` runs it.
//!
//! ```sh
//! cargo run --example from_code -- 127.0.0.1:8080
//! ```
use actix_web::{web, App, HttpServer};
use brownout::{Brownout, Config};

#[actix_web::main]
async fn main() -> Result<(), brownout::Report> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());

    let config = Config::builder()
        .rate_limit(20.0, 100) // 20 credits a second per API key, bursts of 100
        .route_cost("POST /v1/charges", 5) // a charge costs 5
        .critical_route("POST /v1/charges") // never shed under overload
        .build()?; // validated as config.yaml would be
    let brownout = Brownout::builder(config).build()?;
    brownout.start()?;

    let b = brownout.clone();
    HttpServer::new(move || {
        App::new()
            .wrap(b.middleware())
            .route("/v1/charges", web::post().to(|| async { "charged" }))
            .route("/", web::get().to(|| async { "hi" }))
    })
    .bind(addr)?
    .run()
    .await?;
    brownout.shutdown().await;
    Ok(())
}
