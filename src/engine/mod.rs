//! The engine: everything one request's decision needs, and nothing above it. It holds the live
//! [`Settings`] (a [`SettingsCell`]: swapped through `ArcSwap`, announced to the actors), the published shed plan, the keyed-state store, the
//! metrics and the in-flight count, and runs the limiter chain ([`chain`]). The actors keep it
//! up to date through published snapshots; the `Brownout` handle, the middleware and the admin
//! server sit on top of it.

mod alone;
mod asks;
mod cell;
mod chain;
mod evaluate;
mod guards;
mod hold;
mod judge;

#[cfg(feature = "redis")]
pub(crate) use asks::asks;
pub(crate) use asks::elastic;
pub(crate) use cell::SettingsCell;
pub(crate) use chain::{run_chain, Admission, Paced, Queued, Verdict};
#[cfg(feature = "actix")]
pub(crate) use hold::WorkerEngine;
pub(crate) use hold::{EngineRef, RequestHold};
pub(crate) use judge::judge;

use crate::classify::Classifier;
use crate::clock::Clock;
use crate::config::{ConfigError, LimitersConfig, Mode, QuotaKey};
use crate::control::{InFlight, PublishedPlan};
use crate::limiter::adaptive_concurrency::AdaptiveState;
use crate::limiter::request_rate::{CheckTime, RateRules};
use crate::limiter::{LimiterName, Request};
use crate::logging::LogGate;
use crate::math::window::WindowRule;
use crate::metrics::Metrics;
use crate::rng::SplitMix64;
use crate::store::Keyed;
use crate::store::Table;
use crate::tier::Tier;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// The live, validated settings: swapped atomically as a whole, read without locks.
///
/// # Examples
/// ```
/// use brownout::{Brownout, Config, Mode};
///
/// let brownout = Brownout::builder(Config::builder().rate_limit(10.0, 20).build()?).build()?;
/// let settings = brownout.settings(); // a snapshot: later changes swap in a new one
/// assert_eq!(settings.version, 1);
/// assert!(!settings.kill_switch);
/// assert_eq!(settings.limiters.request_rate.mode, Mode::Enforce);
/// assert_eq!(settings.limiters.request_rate.burst, 20);
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug)]
pub struct Settings {
    /// Bumped by every accepted change.
    pub version: u64,
    /// While engaged, every limiter is off.
    pub kill_switch: bool,
    /// The limiter blocks.
    pub limiters: LimitersConfig,
    /// The compiled classifier.
    pub classifier: Classifier,
    /// The compiled request-rate rules.
    pub(crate) rules: RateRules,
    /// Whether `GET /metrics` needs the admin token (`admin.metrics_auth`, reloadable).
    pub metrics_auth: bool,
    /// How a request is decided: request_rate alone or the guards alone where they are the
    /// only limiters on (no ask of the keyed store), else the general chain.
    pub(crate) decider: Decider,
    /// Nothing counts requests in flight (worker_utilization and adaptive_concurrency off)
    /// and the deadline does not cancel: a request that holds nothing is passed through.
    pub(crate) pass_through: bool,
}

impl Settings {
    /// Compiles validated limiter settings.
    pub(crate) fn new(
        version: u64,
        kill_switch: bool,
        limiters: LimitersConfig,
        mut classifier: Classifier,
        metrics_auth: bool,
    ) -> Result<Self, ConfigError> {
        let rules = RateRules::compile(&limiters.request_rate)
            .map_err(|m| ConfigError::invalid("limiters.request_rate", m))?;
        classifier.hash_ips =
            rules.per_ip.is_some() || rules.quotas.iter().any(|q| q.key == QuotaKey::Ip);
        let decider = Decider::of(&limiters);
        let pass_through = limiters.worker_utilization.mode == crate::config::Mode::Off
            && limiters.adaptive_concurrency.mode == crate::config::Mode::Off
            && !limiters.deadline.cancel;
        Ok(Self {
            decider,
            pass_through,
            version,
            kill_switch,
            limiters,
            classifier,
            rules,
            metrics_auth,
        })
    }

    /// Publishes what the metrics show of these settings: each limiter's mode, the kill
    /// switch, the version and the worker-utilization controller's thresholds.
    pub(crate) fn publish(&self, metrics: &Metrics) {
        metrics.publish_settings(self.modes(), self.kill_switch, self.version);
        let wu = &self.limiters.worker_utilization;
        metrics.publish_thresholds(wu.end_of_good, wu.start_of_bad);
    }

    /// Each limiter's configured mode, in check order.
    #[inline]
    pub fn modes(&self) -> [Mode; LimiterName::COUNT] {
        LimiterName::ALL.map(|l| l.mode(&self.limiters))
    }

    /// The mode each limiter runs under for `req`: the configured one, but `Off` for every
    /// limiter under the kill switch, for the per-client limiters (request_rate,
    /// concurrent_requests) on a CORS preflight unless `classifier.charge_preflights`, and for
    /// fleet_usage on a critical request (its reserve is what critical requests use), and for
    /// request_rate on a request it has charged already (it waited for its turn). The one
    /// rule for what applies to a request: the chain decides under it, and fleet mode asks the
    /// shared store for what it says applies.
    #[inline]
    pub(crate) fn modes_for(&self, req: &Request<'_>) -> RequestModes<'_> {
        RequestModes {
            limiters: &self.limiters,
            killed: self.kill_switch,
            per_client: req.per_client(self.classifier.charge_preflights),
            critical: req.tier == Tier::Critical,
            paid: req.paid,
        }
    }
}

/// Which way the requests of some settings are decided ([`Settings::decider`]): each way
/// decides alike, the first two at less cost where they apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decider {
    /// Only request_rate is on, with no quota, pacing, elastic bucket or fields: its bucket
    /// and ceiling are charged without an ask (`engine/alone.rs`).
    RateAlone,
    /// No per-key limiter is on: the controller's plan and the fast guard, with no ask
    /// (`engine/guards.rs`).
    Guards,
    /// Everything else: the general chain (`engine/chain.rs`).
    Chain,
}

impl Decider {
    /// The way `limiters` are decided.
    fn of(limiters: &LimitersConfig) -> Self {
        if alone::rate_alone(limiters) {
            Decider::RateAlone
        } else if guards::guards_alone(limiters) {
            Decider::Guards
        } else {
            Decider::Chain
        }
    }
}

/// Each limiter's mode for one request ([`Settings::modes_for`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestModes<'s> {
    limiters: &'s LimitersConfig,
    killed: bool,
    per_client: bool,
    critical: bool,
    paid: bool,
}

impl RequestModes<'_> {
    /// `limiter`'s mode for the request.
    #[inline]
    pub(crate) fn of(&self, limiter: LimiterName) -> Mode {
        // One arm per limiter: a new one must say when a request skips it.
        let skipped = self.killed
            || match limiter {
                LimiterName::RequestRate => !self.per_client || self.paid,
                LimiterName::ConcurrentRequests => !self.per_client,
                LimiterName::FleetUsage => self.critical,
                LimiterName::WorkerUtilization | LimiterName::AdaptiveConcurrency => false,
            };
        if skipped {
            Mode::Off
        } else {
            limiter.mode(self.limiters)
        }
    }
}

/// The per-request decision's state: read by every middleware instance without locks, written
/// by the actors (plan, settings) and by each request's own hold (counts, permits).
pub(crate) struct Engine {
    settings: SettingsCell,
    plan: PublishedPlan,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    in_flight: Arc<InFlight>,
    /// The per-key limiters' state: the local store and, in fleet mode, the shared one.
    keyed: Keyed,
    /// adaptive_concurrency's count, latencies and published limit (local to this process).
    adaptive: Arc<AdaptiveState>,
    /// Seeds every random stream.
    seed: u64,
    /// Seeds the hash of client keys and IPs (`seed`, or in fleet mode one every server
    /// shares).
    key_seed: u64,
    /// Hands each middleware instance (and each `check`) its own random stream.
    rng_streams: AtomicU64,
    fail_open_log: LogGate,
    dark_log: LogGate,
}

/// The engine's parts, each a type with its own methods; reached through these (inlined: the
/// middleware is generic, so it is compiled in the embedder's crate, where a plain call to a
/// crate-private accessor would not be inlined).
impl Engine {
    /// An engine over `settings`, with `plan` published and the counters at zero; `seeds` are
    /// the random streams' seed and the key hash's.
    pub(crate) fn new(
        settings: Settings,
        plan: &crate::control::ShedPlan,
        clock: Arc<dyn Clock>,
        in_flight: Arc<InFlight>,
        keyed: Keyed,
        adaptive: Arc<AdaptiveState>,
        (seed, key_seed): (u64, u64),
    ) -> Self {
        Self {
            settings: SettingsCell::new(settings),
            plan: PublishedPlan::new(plan),
            metrics: Metrics::new(),
            in_flight,
            keyed,
            adaptive,
            seed,
            key_seed,
            rng_streams: AtomicU64::new(0),
            fail_open_log: LogGate::new(Duration::from_secs(10)),
            dark_log: LogGate::new(Duration::from_secs(10)),
            clock,
        }
    }

    /// The live settings.
    #[inline]
    pub(crate) fn settings(&self) -> &SettingsCell {
        &self.settings
    }

    /// The controller's published shed plan.
    #[inline]
    pub(crate) fn plan(&self) -> &PublishedPlan {
        &self.plan
    }

    /// The clock every decision reads.
    #[inline]
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The metrics.
    #[inline]
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Requests in progress, by tier.
    #[inline]
    pub(crate) fn in_flight(&self) -> &Arc<InFlight> {
        &self.in_flight
    }

    /// The per-key limiters' state.
    #[inline]
    pub(crate) fn keyed(&self) -> &Keyed {
        &self.keyed
    }

    /// adaptive_concurrency's state.
    #[inline]
    pub(crate) fn adaptive(&self) -> &Arc<AdaptiveState> {
        &self.adaptive
    }

    /// Each tier's service time, learned by adaptive_concurrency while it runs.
    pub(crate) fn tier_service_times(&self) -> [Option<Duration>; 4] {
        let on = self.settings.load().limiters.adaptive_concurrency.mode != Mode::Off;
        if on {
            self.adaptive.floors()
        } else {
            [None; 4]
        }
    }

    /// The seed of the client key and IP hash.
    pub(crate) fn key_seed(&self) -> u64 {
        self.key_seed
    }

    /// A random stream of its own, for one middleware instance or one thread's `check`s.
    pub(crate) fn random_stream(&self) -> SplitMix64 {
        let instance = self
            .rng_streams
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        SplitMix64::new(self.seed ^ crate::rng::mix(instance + 1))
    }
}

impl Engine {
    /// Counts a fail-open and logs it, at most once per 10 s (with a count of the rest).
    pub(crate) fn fail_open(
        &self,
        limiter: &'static str,
        reason: &'static str,
        message: impl FnOnce() -> String,
    ) {
        self.metrics.fail_open(limiter, reason);
        if let Some(held_back) = self.fail_open_log.open(self.clock.now()) {
            tracing::warn!(
                limiter,
                reason,
                suppressed = held_back,
                "failing open: {}",
                message()
            );
        }
    }
}

impl Engine {
    /// Drops full buckets, expired windows and keys with nothing in flight.
    pub(crate) fn evict_idle(&self) {
        let settings = self.settings.load();
        let rules: Vec<(Table, WindowRule)> = (settings.rules.quotas.iter().enumerate())
            .map(|(i, q)| (crate::limiter::request_rate::quota_table(i), q.rule))
            .collect();
        let at = self.check_time(self.clock.now());
        self.keyed.evict_idle(at.mono, at.unix, &rules);
    }

    /// `now` (a reading of the clock) in µs, monotonic and since the Unix epoch.
    pub(crate) fn check_time(&self, now: Duration) -> CheckTime {
        let mono = now.as_micros() as u64;
        CheckTime {
            mono,
            unix: self.clock.unix_origin().as_micros() as u64 + mono,
        }
    }

    /// Logs a dark-mode rejection, at most once per 10 s (with a count of the rest).
    pub(crate) fn dark_rejected(&self, limiter: &'static str, tier: Tier) {
        if let Some(held_back) = self.dark_log.open(self.clock.now()) {
            tracing::info!(
                limiter,
                tier = tier.as_str(),
                suppressed = held_back,
                "dark mode: would have rejected this request"
            );
        }
    }
}

impl Engine {
    /// What `request` asks of the shared store and its answer (`None`: Redis did not answer
    /// in time), when it asks it first (fleet mode, per_request); `None`: decided here.
    pub(crate) async fn ask_first(
        &self,
        settings: &Settings,
        request: &Request<'_>,
    ) -> Option<(crate::store::Ask, Option<crate::store::Answer<'_>>)> {
        #[cfg(feature = "redis")]
        if self.keyed.asks_first() {
            if let Some(ask) = asks(settings, request, &self.plan.load()) {
                let answer = self.answer_shared(&ask).await;
                return Some((ask, answer));
            }
        }
        let _ = (settings, request);
        None
    }
}

#[cfg(feature = "redis")]
impl Engine {
    /// The shared store's answer to `asked`, or `None` when Redis cannot answer in time
    /// (error, timeout, missing script; the call counted and logged, unless the breaker
    /// skipped it): the request is then decided on this server's own limiters. The middleware
    /// and the tower layer both ask here.
    pub(crate) async fn answer_shared(
        &self,
        asked: &crate::store::Ask,
    ) -> Option<crate::store::Answer<'_>> {
        match self.keyed.answer_shared(asked).await {
            Ok(answer) => Some(answer),
            Err(failed) => {
                // A call not made (the breaker opened meanwhile) is what its gauge shows.
                if failed.skipped.is_none() {
                    self.metrics.shared_store_error("redis", failed.op);
                    self.fail_open("store", failed.reason(), || {
                        format!(
                            "redis {}: {}; deciding on local limits",
                            failed.op, failed.error
                        )
                    });
                }
                None
            }
        }
    }
}
