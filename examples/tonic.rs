//! brownout in a tonic server: the same limiters and metrics as the actix middleware, behind a
//! tower layer, with refusals in gRPC's words (a `Status` of
//! RESOURCE_EXHAUSTED or UNAVAILABLE, with `grpc-retry-pushback-ms`).
//!
//! The service is `grpc.health.v1.Health`, which tonic-health ships with its generated code (no
//! protoc needed). Run `cargo run --example tonic --features tonic -- 127.0.0.1:50051`, then
//! call it with any gRPC client, e.g.
//! `grpcurl -plaintext 127.0.0.1:50051 grpc.health.v1.Health/Check` (its method `Check` is
//! critical here: never shed; `Watch`, a server stream, holds its concurrency slot while it
//! streams).

use brownout::{Brownout, Config};
use tonic::transport::Server;

#[tokio::main]
async fn main() -> Result<(), brownout::Report> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:50051".into());
    let addr: std::net::SocketAddr = addr.parse()?;
    // gRPC methods are written in their HTTP form: `POST /package.Service/Method`.
    let config = Config::builder()
        .rate_limit(20.0, 100)
        .concurrent_requests(4)
        .critical_route("POST /grpc.health.v1.Health/Check")
        .build()?;
    let brownout = Brownout::builder(config).build()?;
    brownout.start()?;

    let (_reporter, health) = tonic_health::server::health_reporter();
    Server::builder()
        .layer(brownout.layer())
        .add_service(health)
        .serve(addr)
        .await?;
    brownout.shutdown().await;
    Ok(())
}
