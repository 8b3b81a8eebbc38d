//! Helpers shared by the integration tests.
#![allow(dead_code)]
// cli's tests include this file too, where `feature = "tower"` names a feature of cli (which
// has none by that name): there the hyper admin server is left out.
#![allow(unexpected_cfgs)]

pub mod faulty;

use brownout::clock::ManualClock;
use brownout::config::{HumanDuration, SourceKind};
use brownout::control::{SourceError, UtilizationSource};
use brownout::{Brownout, Config};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `GET /v1/items` (tier get), as the demo routes it.
pub fn get() -> actix_web::test::TestRequest {
    actix_web::test::TestRequest::get().uri("/v1/items")
}

/// `POST /v1/items` (tier post).
pub fn post() -> actix_web::test::TestRequest {
    actix_web::test::TestRequest::post().uri("/v1/items")
}

/// `POST /v1/charges` (critical with [`config`]'s classifier, as in the demo).
pub fn charge() -> actix_web::test::TestRequest {
    actix_web::test::TestRequest::post().uri("/v1/charges")
}

/// A utilization gauge the test sets by hand.
#[derive(Clone, Default)]
pub struct Gauge(Arc<AtomicU64>);

impl Gauge {
    pub fn set(&self, u: f64) {
        self.0.store(u.to_bits(), Ordering::SeqCst);
    }
}

impl UtilizationSource for Gauge {
    fn name(&self) -> &str {
        "test_gauge"
    }
    fn sample(&mut self, _now: Duration) -> Result<f64, SourceError> {
        Ok(f64::from_bits(self.0.load(Ordering::SeqCst)))
    }
}

/// A config driven only by `sample_now` (the regular interval, 5 minutes, the longest allowed, never comes within a test), with a custom
/// source and a fixed Retry-After; the demo's classifier (`POST /v1/charges` critical, keys
/// starting with `sk_test_` test-mode: the library has neither by default).
pub fn config() -> Config {
    let mut c = Config::default();
    c.classifier.critical = vec!["POST /v1/charges".into()];
    c.classifier.test_key_prefix = Some("sk_test_".into());
    let wu = &mut c.limiters.worker_utilization;
    wu.source = SourceKind::Custom;
    wu.sample_interval = HumanDuration::from_secs(300);
    wu.retry_after = Some(HumanDuration::from_secs(3));
    c
}

/// [`config`] with only request_rate on, enforcing a bucket of `burst` credits that
/// practically never refills (0.001 a second), per key only: no per-IP ceiling (every test
/// request comes from one address; the tests of the ceiling set it).
pub fn slow_bucket(burst: u32) -> Config {
    let mut c = config();
    c.limiters.worker_utilization.mode = brownout::Mode::Off;
    let rr = &mut c.limiters.request_rate;
    rr.mode = brownout::Mode::Enforce;
    rr.rate = 0.001;
    rr.burst = burst;
    rr.per_ip = brownout::config::PerIp::Off;
    c
}

/// A started brownout on a manual clock with a hand-set gauge.
pub struct Rig {
    pub brownout: Brownout,
    pub clock: Arc<ManualClock>,
    pub gauge: Gauge,
}

impl Rig {
    pub fn new(config: Config) -> Self {
        Self::with(config, |b| b)
    }

    pub fn with(
        config: Config,
        f: impl FnOnce(brownout::BrownoutBuilder) -> brownout::BrownoutBuilder,
    ) -> Self {
        let clock = Arc::new(ManualClock::new());
        let gauge = Gauge::default();
        let builder = Brownout::builder(config)
            .clock(clock.clone())
            .seed(7)
            .admin_token("test-token")
            .custom_source(gauge.clone());
        let brownout = f(builder).build().expect("valid config");
        brownout.start().expect("inside a runtime");
        Self {
            brownout,
            clock,
            gauge,
        }
    }

    /// One controller step after `dt` at utilization `u`; returns the new amount.
    pub async fn step(&self, u: f64, dt: Duration) -> f64 {
        self.gauge.set(u);
        self.clock.advance(dt);
        self.brownout
            .sample_now()
            .await
            .expect("actors running")
            .amount
    }

    /// Drives the controller to shed everything sheddable.
    pub async fn shed_all(&self) {
        while self.step(1.0, Duration::from_secs(28)).await < 1.0 {}
    }

    /// Starts the admin API on a loopback port, served by `on`; its base URL.
    pub fn admin_on(&self, on: AdminOn) -> String {
        format!("http://{}", on.serve(&self.brownout))
    }

    /// Starts the admin API on a loopback port; its base URL.
    pub fn admin(&self) -> String {
        let admin = self
            .brownout
            .admin_server_on("127.0.0.1:0".parse().unwrap())
            .unwrap();
        actix_web::rt::spawn(admin.server);
        format!("http://{}", admin.local_addr)
    }

    /// The value of one series in the metrics text, e.g.
    /// `brownout_requests_total{tier="get",outcome="allowed"}`.
    pub fn metric(&self, series: &str) -> f64 {
        metric(&self.brownout.render_metrics(), series)
    }
}

/// A response header's value as text (empty when absent).
pub fn header<B>(res: &actix_web::dev::ServiceResponse<B>, name: &str) -> String {
    res.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The value of one series in a Prometheus text exposition (0 when absent).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

/// A raw HTTP exchange's answer.
pub struct RawResponse {
    pub status: u16,
    /// The head, lower-cased.
    pub head: String,
    pub body: String,
}

impl RawResponse {
    /// The value of header `name` (lower case), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            (n.trim() == name).then(|| v.trim())
        })
    }
}

/// Writes `request` byte for byte (no client normalizes its request line) and reads the answer
/// until the server closes the connection (send `Connection: close`), within 5 s.
pub async fn raw_http(addr: std::net::SocketAddr, request: String) -> RawResponse {
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        RawResponse {
            status,
            head: head.to_ascii_lowercase(),
            body: body.to_owned(),
        }
    })
    .await
    .unwrap()
}

/// A CSV file the binary wrote: its header and rows.
pub struct Csv {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Csv {
    pub fn read(path: &std::path::Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap();
        let mut lines = text.lines();
        let header = lines
            .next()
            .unwrap()
            .split(',')
            .map(str::to_owned)
            .collect();
        let rows = lines
            .map(|l| l.split(',').map(str::to_owned).collect())
            .collect();
        Self { header, rows }
    }

    /// The values of column `name`, as numbers.
    pub fn column(&self, name: &str) -> Vec<f64> {
        let i = self
            .header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}"));
        self.rows.iter().map(|r| r[i].parse().unwrap()).collect()
    }
}

use serde_json::Value;

/// The admin API of a rig over HTTP, with the rigs' token.
pub struct AdminClient {
    pub base: String,
    pub http: awc::Client,
}

impl AdminClient {
    /// The admin API of `rig`, started on a loopback port.
    pub async fn new(rig: &Rig) -> Self {
        Self::on(rig, AdminOn::Actix)
    }

    /// The admin API of `rig`, served by `on` on a loopback port.
    pub fn on(rig: &Rig, on: AdminOn) -> Self {
        Self {
            base: rig.admin_on(on),
            http: awc::Client::new(),
        }
    }

    /// Sends `method path` with an optional JSON body and extra headers; the status, the
    /// JSON answer (null if none) and the headers.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value, awc::http::header::HeaderMap) {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .bearer_auth("test-token");
        for (k, v) in headers {
            req = req.insert_header((*k, *v));
        }
        let mut res = match body {
            Some(b) => {
                req.insert_header(("content-type", "application/json"))
                    .send_body(b.to_string())
                    .await
            }
            None => req.send().await,
        }
        .unwrap();
        let bytes = res.body().limit(1 << 20).await.unwrap();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (res.status().as_u16(), value, res.headers().clone())
    }
}

/// [`config`] with `admin.overrides_file` in a fresh folder of the test's own (`name`); the
/// folder, to remove at the end.
pub fn with_overrides_file(name: &str) -> (Config, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("brownout-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = config();
    c.admin.overrides_file = Some(dir.join("overrides.json"));
    (c, dir)
}

/// `GET /v1/state` of the admin API at `base`, with the rigs' token.
pub async fn state(base: &str) -> serde_json::Value {
    let mut res = awc::Client::new()
        .get(format!("{base}/v1/state"))
        .bearer_auth("test-token")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

/// The texts an SVG chart shows, trimmed.
pub fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = t.split_once('>')?.1;
            Some(body.split_once("</text>")?.0.trim().to_owned())
        })
        .collect()
}

/// Whether `check` comes true within 100 tries 20 ms apart (2 s): for what happens on a server
/// task after the test's last step (a slot freed when a client hangs up).
pub async fn eventually<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// What serves the admin API in a test: the actix server, or hyper (feature `tower`). Tests
/// written once against the API run on both ([`on_both_admin_servers!`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminOn {
    Actix,
    #[cfg(feature = "tower")]
    Hyper,
}

impl AdminOn {
    /// Binds `brownout`'s admin server to `bind` and spawns it; where it listens.
    pub fn bind(
        self,
        brownout: &Brownout,
        bind: std::net::SocketAddr,
    ) -> Result<std::net::SocketAddr, brownout::Error> {
        match self {
            AdminOn::Actix => {
                let admin = brownout.admin_server_on(bind)?;
                actix_web::rt::spawn(admin.server);
                Ok(admin.local_addr)
            }
            #[cfg(feature = "tower")]
            AdminOn::Hyper => {
                let admin = brownout.admin_server_hyper_on(bind)?;
                tokio::spawn(admin.server);
                Ok(admin.local_addr)
            }
        }
    }

    /// Serves `brownout`'s admin API on a loopback port; where it listens.
    pub fn serve(self, brownout: &Brownout) -> std::net::SocketAddr {
        self.bind(brownout, "127.0.0.1:0".parse().unwrap())
            .expect("admin server bound")
    }
}

/// For each `async fn name(on: AdminOn)` named, a module `name` of two tests: the function
/// against the actix admin server, and against the hyper one (feature `tower`).
#[macro_export]
macro_rules! on_both_admin_servers {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[actix_web::test]
                async fn actix() {
                    super::$name($crate::common::AdminOn::Actix).await
                }

                #[cfg(feature = "tower")]
                #[actix_web::test]
                async fn hyper() {
                    super::$name($crate::common::AdminOn::Hyper).await
                }
            }
        )*
    };
}
