//! Utilization sources: what the sampler reads every `sample_interval`. Each reports the
//! time-average over the interval: `in_flight` and closures integrate readings taken every
//! [`OBSERVE_EVERY`](super::OBSERVE_EVERY) between samples; `cpu` and `runtime` measure time over time already.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

use super::average::TimeAverage;
use crate::shard::Sharded;
use crate::tier::{PerTier, Tier};

/// Why a source could not produce a sample.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

/// A gauge of how busy this process is: 1 means at capacity. Above 1 it says how far over
/// (shown in `/v1/state` as the controller's `demand`); the controller itself reads at most 1.
///
/// Implement it for your own signal (a DB pool's usage, a queue's depth) and register it with
/// [`BrownoutBuilder::custom_source`](crate::BrownoutBuilder::custom_source). A source that
/// errors or panics is counted in `brownout_fail_open_total` and its sample is skipped.
///
/// `sample` should report the average since the previous sample, not an instantaneous
/// reading: one reading every few seconds of a gauge that moves within a second is mostly
/// noise. A source that can only read the gauge now implements `observe` (called every
/// [`OBSERVE_EVERY`](super::OBSERVE_EVERY) between samples) and averages its readings, as [`source_fn`] does.
pub trait UtilizationSource: Send + 'static {
    /// A short name for logs.
    fn name(&self) -> &str;
    /// Reports the utilization over the interval since the previous sample; `now` is the
    /// injected clock's time.
    fn sample(&mut self, now: Duration) -> Result<f64, SourceError>;
    /// Takes a reading between samples (every [`OBSERVE_EVERY`](super::OBSERVE_EVERY)); by default nothing.
    fn observe(&mut self, now: Duration) {
        let _ = now;
    }
}

/// A source made of a name and a closure.
pub struct FnSource<F> {
    name: String,
    f: F,
    average: TimeAverage,
}

/// Wraps a gauge closure as a [`UtilizationSource`] that reports the time-average of its
/// readings: the closure is called every [`OBSERVE_EVERY`](super::OBSERVE_EVERY), so keep it cheap (an atomic
/// load, a pool's counters). A reading that errors is left out of the average; an error at
/// the sample skips that sample.
///
/// # Examples
/// The share of a database pool in use as the controller's input (`source: custom`):
/// ```
/// use brownout::{Brownout, Config};
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
///
/// let busy = Arc::new(AtomicU32::new(0)); // your pool updates it
/// let gauge = busy.clone();
/// let source = brownout::control::source_fn("db_pool", move || {
///     Ok(f64::from(gauge.load(Ordering::Relaxed)) / 32.0) // of 32 connections
/// });
/// let config = Config::builder()
///     .limiters(|l| l.worker_utilization.source = brownout::config::SourceKind::Custom)
///     .build()?;
/// let brownout = Brownout::builder(config).custom_source(source).build()?;
/// # let _ = brownout;
/// # Ok::<(), brownout::Report>(())
/// ```
pub fn source_fn<F>(name: impl Into<String>, f: F) -> FnSource<F>
where
    F: FnMut() -> Result<f64, SourceError> + Send + 'static,
{
    FnSource {
        name: name.into(),
        f,
        average: TimeAverage::default(),
    }
}

impl<F> UtilizationSource for FnSource<F>
where
    F: FnMut() -> Result<f64, SourceError> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn sample(&mut self, now: Duration) -> Result<f64, SourceError> {
        let reading = (self.f)()?;
        Ok(self.average.take(now, reading))
    }
    fn observe(&mut self, now: Duration) {
        if let Ok(reading) = (self.f)() {
            self.average.observe(now, reading);
        }
    }
}

/// Requests in progress through the middleware, per tier.
#[derive(Debug, Default)]
pub struct InFlight {
    /// Per tier, sharded by thread: entering and leaving write this worker's own cache line;
    /// the sums stay exact.
    per_tier: Sharded<4>,
}

impl InFlight {
    #[inline]
    pub(crate) fn enter(&self, tier: Tier) {
        self.per_tier.add(tier.index(), 1);
    }

    #[inline]
    pub(crate) fn leave(&self, tier: Tier) {
        self.per_tier.add(tier.index(), -1);
    }

    /// Requests in progress, per tier.
    pub fn per_tier(&self) -> PerTier<i64> {
        PerTier::from_fn(|t| self.per_tier.sum(t.index()).max(0))
    }

    /// Requests in progress in all tiers.
    pub fn total(&self) -> i64 {
        (0..4).map(|i| self.per_tier.sum(i)).sum::<i64>().max(0)
    }
}

/// `cpu`: this process's CPU time over wall time and cores since the previous sample (feature
/// `cpu`).
#[cfg(feature = "cpu")]
pub struct CpuSource {
    system: sysinfo::System,
    pid: sysinfo::Pid,
    cores: f64,
    last: Option<(u64, Duration)>,
}

#[cfg(feature = "cpu")]
impl CpuSource {
    /// A source for the current process.
    pub fn new() -> Result<Self, SourceError> {
        let err = |e: sysinfo::Error| SourceError(format!("cpu source unavailable: {e:?}"));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        Ok(Self {
            system: sysinfo::System::new().map_err(err)?,
            pid: sysinfo::get_current_pid().map_err(err)?,
            cores,
            last: None,
        })
    }

    fn cpu_millis(&mut self) -> Result<u64, SourceError> {
        use sysinfo::{ProcessRefreshKind, ProcessesToUpdate};
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[self.pid]),
            false,
            ProcessRefreshKind::nothing().with_cpu(),
        );
        self.system
            .process(self.pid)
            .map(|p| p.accumulated_cpu_time())
            .ok_or_else(|| SourceError("cpu source: own process not found".into()))
    }
}

#[cfg(feature = "cpu")]
impl UtilizationSource for CpuSource {
    fn name(&self) -> &str {
        "cpu"
    }
    fn sample(&mut self, now: Duration) -> Result<f64, SourceError> {
        let cpu = self.cpu_millis()?;
        let previous = self.last.replace((cpu, now));
        let Some((last_cpu, last_at)) = previous else {
            return Ok(0.0);
        };
        let wall_ms = now.saturating_sub(last_at).as_secs_f64() * 1000.0;
        if wall_ms <= 0.0 {
            return Ok(0.0);
        }
        Ok(cpu.saturating_sub(last_cpu) as f64 / (wall_ms * self.cores))
    }
}

/// The tokio runtimes that serve requests: each actix worker's, registered as the worker builds
/// its middleware; a tower app's multi-thread runtime, registered by the layer's first request.
#[derive(Debug, Default)]
pub struct RuntimeRegistry {
    runtimes: Mutex<Vec<(ThreadId, tokio::runtime::RuntimeMetrics)>>,
    /// Whether a runtime shared by several threads was registered.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    shared: std::sync::atomic::AtomicBool,
}

impl RuntimeRegistry {
    /// Registers the runtime of the calling thread, once per thread.
    pub fn register_current(&self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let id = std::thread::current().id();
        let mut all = self.runtimes.lock().unwrap_or_else(PoisonError::into_inner);
        if !all.iter().any(|(t, _)| *t == id) {
            all.push((id, handle.metrics()));
        }
    }

    /// Registers the calling thread's runtime once for every thread that runs it (a
    /// multi-thread runtime: its metrics count all its workers, so once is all).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub fn register_shared(&self) {
        if !self.shared.swap(true, std::sync::atomic::Ordering::Relaxed) {
            self.register_current();
        }
    }

    /// Busy time and worker count of every registered runtime.
    fn snapshot(&self) -> Vec<(ThreadId, Duration, usize)> {
        let all = self.runtimes.lock().unwrap_or_else(PoisonError::into_inner);
        all.iter()
            .map(|(id, m)| {
                let workers = m.num_workers();
                let busy = (0..workers).map(|w| m.worker_total_busy_duration(w)).sum();
                (*id, busy, workers)
            })
            .collect()
    }
}

/// `runtime`: busy time of the worker runtimes over their wall time since the last sample.
pub struct RuntimeSource {
    registry: Arc<RuntimeRegistry>,
    last: Vec<(ThreadId, Duration)>,
    last_at: Option<Duration>,
}

impl RuntimeSource {
    /// Reads the runtimes in `registry`.
    pub fn new(registry: Arc<RuntimeRegistry>) -> Self {
        Self {
            registry,
            last: Vec::new(),
            last_at: None,
        }
    }
}

impl UtilizationSource for RuntimeSource {
    fn name(&self) -> &str {
        "runtime"
    }
    fn sample(&mut self, now: Duration) -> Result<f64, SourceError> {
        let snapshot = self.registry.snapshot();
        if snapshot.is_empty() {
            return Err(SourceError(
                "runtime source: no runtime has registered yet (each actix worker's as it starts; a tower app's with the layer's first request)".into(),
            ));
        }
        let wall = self
            .last_at
            .replace(now)
            .map_or(Duration::ZERO, |at| now.saturating_sub(at));
        let (mut busy, mut capacity) = (Duration::ZERO, Duration::ZERO);
        for &(id, total, workers) in &snapshot {
            // A runtime seen for the first time only sets its baseline.
            if let Some((_, before)) = self.last.iter().find(|(t, _)| *t == id) {
                busy += total.saturating_sub(*before);
                capacity += wall * workers as u32;
            }
        }
        self.last = snapshot.iter().map(|&(id, total, _)| (id, total)).collect();
        if capacity.is_zero() {
            return Ok(0.0);
        }
        Ok(busy.as_secs_f64() / capacity.as_secs_f64())
    }
}

/// The demand the sources report: the largest finite answer of those that answered, at least
/// 0 and not capped at 1 (the controller reads it capped: [`ShedPlan`](super::ShedPlan)
/// keeps both); `None` if none did.
pub fn combine(samples: impl IntoIterator<Item = f64>) -> Option<f64> {
    samples
        .into_iter()
        .filter(|u| u.is_finite())
        .map(|u| u.max(0.0))
        .reduce(f64::max)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // its tests read the real clock (CPU time against it)
#[path = "source_tests.rs"]
mod tests;
