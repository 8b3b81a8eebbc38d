//! brownout in a tonic server: the same limiters, admin API and metrics as the actix
//! middleware, behind a tower layer, with no actix crate in the build; refusals are in gRPC's
//! words (a `Status` of RESOURCE_EXHAUSTED or UNAVAILABLE, with `grpc-retry-pushback-ms`).
//!
//! The service is `grpc.health.v1.Health`, which tonic-health ships with its generated code (no
//! protoc needed). Run
//! `cargo run --example tonic --no-default-features --features tonic -- 127.0.0.1:50051`, then
//! call it with any gRPC client (`grpc_health_probe -addr=127.0.0.1:50051`), or with curl (the
//! gRPC frame of an empty request message is five zero bytes):
//!
//! ```sh
//! printf '\0\0\0\0\0' | curl -si --http2-prior-knowledge -H 'content-type: application/grpc' \
//!   -H 'te: trailers' --data-binary @- http://127.0.0.1:50051/grpc.health.v1.Health/Check
//! ```
//!
//! Its method `Check` is critical here: never shed under overload (its rate limit still holds:
//! a burst past it reads `grpc-status: 8`). `Watch`, a server stream, holds its concurrency
//! slot while it streams. The peer address (for per-IP limits and anonymous clients) is
//! tonic's `TcpConnectInfo`, which the `tonic` feature reads.

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
    // The admin API and /metrics on admin.bind (127.0.0.1:9090), served by hyper.
    let admin = brownout.admin_server_hyper()?;
    println!("admin API on http://{}", admin.local_addr);
    tokio::spawn(admin.server);

    let (_reporter, health) = tonic_health::server::health_reporter();
    Server::builder()
        .layer(brownout.layer())
        .add_service(health)
        .serve(addr)
        .await?;
    brownout.shutdown().await;
    Ok(())
}
