//! What `bench overload` asks of a running demo besides the load: its capacity (for a
//! CPU-bound demo, measured) and its state each second.

use super::process::DemoProcess;
use super::{arm_config, report, OverloadArgs};
use brownout_cli::config::CliConfig;
use std::time::Duration;

/// A CPU-bound demo's capacity: the answers a second of a closed loop (eight clients a worker,
/// at least 32, each sending the next GET when the last is answered) gets from it, every
/// limiter off, over 5 s after a second of warm-up (at most 200,000 requests).
pub(super) fn measure_capacity(config: &CliConfig, args: &OverloadArgs) -> Result<f64, String> {
    let config = arm_config(config, "off", args.cap).expect("a known arm");
    let demo = DemoProcess::start(
        &config,
        &args.out.join("capacity.config.json"),
        &args.out.join("capacity.log"),
        args.server_cpus.as_deref(),
    )?;
    let clients = config.demo.workers.saturating_mul(8).clamp(32, 512);
    let served = actix_web::rt::System::new().block_on(async {
        let client = awc::Client::builder()
            .timeout(Duration::from_secs(5))
            .finish();
        let ok = std::rc::Rc::new(std::cell::Cell::new(0u64));
        let sent = std::rc::Rc::new(std::cell::Cell::new(0u64));
        let from = tokio::time::Instant::now() + Duration::from_secs(1);
        let ends = from + Duration::from_secs(5);
        let url = format!("{}/v1/items", demo.app);
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let (client, ok, sent, url) =
                    (client.clone(), ok.clone(), sent.clone(), url.clone());
                actix_web::rt::spawn(async move {
                    while tokio::time::Instant::now() < ends && sent.get() < 200_000 {
                        sent.set(sent.get() + 1);
                        let answer = client.get(&url).send().await;
                        let now = tokio::time::Instant::now();
                        if answer.is_ok_and(|r| r.status().is_success())
                            && (from..=ends).contains(&now)
                        {
                            ok.set(ok.get() + 1);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
        ok.get()
    });
    drop(demo);
    match served {
        0 => Err("the demo answered nothing in 5 s".into()),
        n => Ok(n as f64 / 5.0),
    }
}

/// The controller's amount and adaptive_concurrency's limit (NaN where unknown), read from
/// `/v1/state` once a second until `stop` is set.
pub(super) async fn poll_state(
    admin: String,
    token: String,
    stop: std::rc::Rc<std::cell::Cell<bool>>,
) -> Vec<report::Polled> {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(1))
        .finish();
    let mut polled = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while !stop.get() {
        tick.tick().await;
        let state = client
            .get(format!("{admin}/v1/state"))
            .bearer_auth(&token)
            .send()
            .await;
        let state = match state {
            Ok(mut res) => res.json::<serde_json::Value>().await.ok(),
            Err(_) => None,
        };
        let read = |block: &str, key: &str| {
            state
                .as_ref()
                .and_then(|v| v[block][key].as_f64())
                .unwrap_or(f64::NAN)
        };
        polled.push(report::Polled {
            amount: read("controller", "amount"),
            limit: read("adaptive_concurrency", "limit"),
            demand: read("controller", "demand"),
            capacity: state
                .as_ref()
                .and_then(|v| v["controller"]["capacity"]["requests"].as_f64())
                .unwrap_or(f64::NAN),
            service: read("adaptive_concurrency", "floor_seconds"),
        });
    }
    polled
}
