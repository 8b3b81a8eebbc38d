//! The tower layer in front of a real tonic server on loopback, driven by tonic's own client
//! (the `grpc.health.v1.Health` service that tonic-health ships, generated code included): a
//! refused call reads as a gRPC `Status` (RESOURCE_EXHAUSTED with the pushback, UNAVAILABLE when
//! shed), critical routes written as gRPC method paths, a server stream holding its concurrency
//! slot until the server finishes it or the client cancels it, a unary call giving its slot back when answered, and a
//! panicking store failing open.

mod common;

use common::Rig;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::server::HealthReporter;

/// The health service behind `rig`'s layer on a loopback port, and a client connected to it.
async fn serve(rig: &Rig) -> HealthClient<Channel> {
    serve_reporting(rig).await.0
}

/// [`serve`], and the reporter of the service's statuses (clearing one ends its streams).
async fn serve_reporting(rig: &Rig) -> (HealthClient<Channel>, HealthReporter) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (reporter, health) = tonic_health::server::health_reporter();
    let server = Server::builder()
        .layer(rig.brownout.layer())
        .add_service(health)
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(async move { server.await.unwrap() });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (HealthClient::new(channel), reporter)
}

fn request() -> HealthCheckRequest {
    HealthCheckRequest {
        service: String::new(),
    }
}

/// The `grpc-retry-pushback-ms` a refusal carries.
fn pushback(status: &tonic::Status) -> u64 {
    let value = status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .expect("the pushback");
    value.to_str().unwrap().parse().unwrap()
}

#[actix_web::test]
async fn a_refused_call_reads_as_resource_exhausted_with_the_pushback() {
    let rig = Rig::new(common::slow_bucket(2));
    let mut client = serve(&rig).await;
    for _ in 0..2 {
        client.check(request()).await.expect("within the bucket");
    }
    let refused = client.check(request()).await.expect_err("over the bucket");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("request_rate"), "{refused:?}");
    assert!(pushback(&refused) >= 1000);
    assert_eq!(
        pushback(&refused) % 1000,
        0,
        "whole seconds, as Retry-After"
    );
    assert_eq!(
        rig.metric(r#"brownout_requests_total{tier="post",outcome="rejected"}"#),
        1.0
    );
}

#[actix_web::test]
async fn a_shed_call_reads_as_unavailable_and_a_critical_method_is_served() {
    let mut config = common::config();
    config.classifier.critical = vec!["POST /grpc.health.v1.Health/Check".into()];
    let rig = Rig::new(config);
    rig.shed_all().await;
    let mut client = serve(&rig).await;
    // The critical method is served; the stream, in the POST tier, is shed.
    client.check(request()).await.expect("critical: never shed");
    let shed = client.watch(request()).await.expect_err("shed");
    assert_eq!(shed.code(), Code::Unavailable, "{shed:?}");
    assert!(shed.message().contains("worker_utilization"), "{shed:?}");
    assert!(pushback(&shed) >= 1000);
}

/// One concurrency slot per client, nothing else on.
fn one_slot() -> brownout::Config {
    let mut config = common::config();
    config.limiters.worker_utilization.mode = brownout::Mode::Off;
    let cr = &mut config.limiters.concurrent_requests;
    cr.mode = brownout::Mode::Enforce;
    cr.max_in_flight = 1;
    config
}

#[actix_web::test]
async fn a_stream_holds_its_slot_until_the_server_finishes_it() {
    let rig = Rig::new(one_slot());
    let (mut client, mut reporter) = serve_reporting(&rig).await;
    let mut watch = client.watch(request()).await.unwrap().into_inner();
    watch.message().await.unwrap().expect("the first status");
    let refused = client.check(request()).await.expect_err("the slot is held");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    // The server ends the stream (its status is cleared): the call ends OK, its slot is free.
    reporter.clear_service_status("").await;
    assert!(watch.message().await.unwrap().is_none(), "the stream ended");
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let freed = common::eventually(|| {
        let mut client = client.clone();
        async move { client.check(request()).await.is_ok() }
    })
    .await;
    assert!(freed, "the finished stream gave its slot back");
}

#[actix_web::test]
async fn a_stream_holds_its_slot_until_the_client_cancels_it() {
    let rig = Rig::new(one_slot());
    let mut client = serve(&rig).await;
    // Unary calls one after another: each gives its slot back when answered.
    for _ in 0..3 {
        client.check(request()).await.expect("one call at a time");
    }
    // A server stream is open (its first message is in): it holds the client's one slot.
    let mut watch = client.watch(request()).await.unwrap().into_inner();
    watch.message().await.unwrap().expect("the first status");
    let refused = client.check(request()).await.expect_err("the slot is held");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("concurrent_requests"),
        "{refused:?}"
    );
    // The client cancels the stream: the slot comes back.
    drop(watch);
    let freed = common::eventually(|| {
        let mut client = client.clone();
        async move { client.check(request()).await.is_ok() }
    })
    .await;
    assert!(freed, "the cancelled stream gave its slot back");
}

#[actix_web::test]
async fn a_panicking_store_fails_open() {
    let config = one_slot();
    let store = std::sync::Arc::new(common::faulty::Faulty::new(true));
    let rig = Rig::with(config, |b| b.store(store));
    let mut client = serve(&rig).await;
    for _ in 0..3 {
        client.check(request()).await.expect("fails open");
    }
    assert_eq!(
        rig.metric(r#"brownout_fail_open_total{limiter="concurrent_requests",reason="panic"}"#),
        3.0
    );
    assert_eq!(
        rig.metric(r#"brownout_requests_total{tier="post",outcome="failed_open"}"#),
        3.0
    );
}
