//! The README's embedding snippet, built by the test suite and run by `tests/embed.rs`:
//! an actix app with brownout in front of it and its admin API beside it.
//!
//! ```sh
//! cargo run --example embed -- config.yaml 127.0.0.1:8080
//! ```
use actix_web::{web, App, HttpServer};
use brownout::{Brownout, ClientKey, Config};

/// Whatever your authentication layer puts in the request's extensions.
#[derive(Clone)]
struct Customer {
    id: String,
}

#[actix_web::main]
async fn main() -> Result<(), brownout::Report> {
    let mut args = std::env::args().skip(1);
    let file = args.next().unwrap_or_else(|| "config.yaml".into());
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8080".into());

    let brownout = Brownout::builder(Config::load(&file)?) // validated, or an error naming the key
        .config_file(&file) // what SIGHUP reloads
        // Count per-user limits against the customer you verified, not an unverified API key.
        .key_hook(|req| {
            req.extensions()
                .get::<Customer>()
                .map(|c| ClientKey::new(&c.id))
        })
        .build()?;
    brownout.start()?; // sampler, controller, operator, SIGHUP reloads
    actix_web::rt::spawn(brownout.admin_server()?.server); // admin API on admin.bind

    let b = brownout.clone();
    HttpServer::new(move || {
        App::new()
            .wrap(b.middleware())
            .route("/", web::get().to(|| async { "hi" }))
    })
    .bind(addr)?
    .run()
    .await?;
    brownout.shutdown().await;
    Ok(())
}
