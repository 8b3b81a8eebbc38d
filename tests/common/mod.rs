//! Helpers shared by the integration tests.
#![allow(dead_code)]

use brownout::clock::ManualClock;
use brownout::config::{HumanDuration, SourceKind};
use brownout::control::{SourceError, UtilizationSource};
use brownout::{Brownout, Config};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
/// source and a fixed Retry-After.
pub fn config() -> Config {
    let mut c = Config::default();
    let wu = &mut c.limiters.worker_utilization;
    wu.source = SourceKind::Custom;
    wu.sample_interval = HumanDuration::from_secs(300);
    wu.retry_after = Some(HumanDuration::from_secs(3));
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

    /// The value of one series in the metrics text, e.g.
    /// `brownout_requests_total{tier="get",outcome="allowed"}`.
    pub fn metric(&self, series: &str) -> f64 {
        metric(&self.brownout.render_metrics(), series)
    }
}

/// The value of one series in a Prometheus text exposition (0 when absent).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}
