//! Prometheus metrics (docs/observability.md). Every handle is resolved once, at construction, so the
//! request path only bumps atomics; label values come from fixed sets, never from requests.
//!
//! Each [`Brownout`](crate::Brownout) owns its own recorder (no global state), so several
//! instances — in tests, say — never mix their numbers.

mod counts;
mod describe;
mod histogram;

pub(crate) use histogram::AtomicHistogram;
use histogram::{DECISION, DECISION_BUCKETS, DECISION_HELP, DELAY, DELAY_BUCKETS, DELAY_HELP};

use crate::control::{InFlight, ShedPlan};
use crate::limiter::LimiterName;
use crate::route_class::{RouteClass, ROUTES};
use crate::schema::Mode;
use crate::shard::Sharded;
use crate::tier::Tier;
use metrics::{Counter, Gauge, Key, Label, Metadata, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Every admin action's name: the `action` of an audit entry and of
/// `brownout_admin_changes_total`, in [`Action`] order. The names are written only here.
pub(crate) const ACTIONS: [&str; 5] = ["mode", "kill_switch", "patch", "revert", "reload"];

/// What an admin change did (its name is [`ACTIONS`] at its position).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// A limiter's mode was set.
    Mode,
    /// The global kill switch was set.
    KillSwitch,
    /// The limiter settings were patched.
    Patch,
    /// A timed mode change ran out and was undone.
    Revert,
    /// The configuration file was read again.
    Reload,
}

impl Action {
    /// The label value and audit name.
    pub const fn as_str(self) -> &'static str {
        ACTIONS[self as usize]
    }
}

/// `outcome` label values of `brownout_requests_total`, in [`Outcome`] order.
const OUTCOMES: [&str; 4] = ["allowed", "rejected", "dark_rejected", "failed_open"];

/// What happened to a request, for `brownout_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum Outcome {
    /// Every limiter said yes (or was off).
    #[default]
    Allowed = 0,
    /// A limiter in enforce mode said no.
    Rejected = 1,
    /// A limiter in dark mode would have said no; the request went through.
    DarkRejected = 2,
    /// A limiter failed and the request went through.
    FailedOpen = 3,
}

/// The `brownout_fail_open_total` series it starts with besides every limiter's `panic`: the
/// other `limiter` label values and reasons.
const FAIL_OPEN_SERIES: [(&str, &str); 5] = [
    ("request_rate", "store_full"),
    ("concurrent_requests", "store_full"),
    ("worker_utilization", "stale_plan"),
    ("worker_utilization", "source_error"),
    ("classifier", "panic"),
];

/// `threshold` label values of `brownout_utilization_threshold_ratio`, in the order
/// [`Metrics::publish_thresholds`] takes them.
const THRESHOLDS: [&str; 2] = ["end_of_good", "start_of_bad"];

const META: Metadata<'static> = Metadata::new("brownout", metrics::Level::INFO, None);

/// All of brownout's metric handles and the recorder that renders them.
pub(crate) struct Metrics {
    recorder: PrometheusRecorder,
    requests: [[Counter; 4]; 4],
    /// What `requests` shows, counted per thread (tier × outcome): every request writes one of
    /// these, so they must not share a cache line between workers. Summed into `requests` on
    /// render.
    request_counts: Sharded<16>,
    rejections: [[[Counter; 2]; 4]; LimiterName::COUNT],
    utilization: Gauge,
    /// The controller's thresholds in force, in [`THRESHOLDS`] order.
    thresholds: [Gauge; 2],
    amount: Gauge,
    shed_probability: [Gauge; 4],
    in_flight: [Gauge; 4],
    expired: [Counter; 4],
    delayed: [Counter; 4],
    delay: AtomicHistogram,
    limiter_mode: [[Gauge; 3]; LimiterName::COUNT],
    concurrency_limit: Gauge,
    concurrency_waiting: Gauge,
    concurrency_critical_share: Gauge,
    capacity: Gauge,
    service_time: [Gauge; 4],
    kill_switch: Gauge,
    decision: AtomicHistogram,
    config_version: Gauge,
    overrides_dropped: Gauge,
    /// Per limiter, in [`LimiterName::ALL`]'s order, for those that keep per-key state.
    tracked_keys: [Option<Gauge>; LimiterName::COUNT],
    admin_changes: [Counter; 5],
    /// Per limiter, in [`LimiterName::ALL`]'s order: those that keep per-key state in the store.
    store_errors: [Option<Counter>; LimiterName::COUNT],
    /// Per limiter: rejected, dark_rejected, failed_open (for the admin state).
    totals: [[AtomicU64; 3]; LimiterName::COUNT],
    /// Per limiter and tier: enforced rejections (for the controller's demand).
    refused: [[AtomicU64; 4]; LimiterName::COUNT],
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The label of route slot `route`: its id, `unmatched` or `other` (a fixed set: never a
/// path).
fn route_label(route: usize) -> &'static str {
    const IDS: [&str; ROUTES] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
        "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31",
        "32", "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46",
        "47", "48", "49", "50", "51", "52", "53", "54", "55", "56", "57", "58", "59", "60", "61",
        "62", "63",
    ];
    match route {
        r if r < ROUTES => IDS[r],
        ROUTES => "unmatched",
        _ => "other",
    }
}

fn key(name: &'static str, labels: &[(&'static str, &'static str)]) -> Key {
    Key::from_parts(
        name,
        labels
            .iter()
            .map(|&(k, v)| Label::new(k, v))
            .collect::<Vec<_>>(),
    )
}

impl Metrics {
    /// Registers and describes every metric.
    pub fn new() -> Self {
        let recorder = PrometheusBuilder::new().build_recorder();
        describe::describe(&recorder);
        let r = &recorder;
        let counter = |name, labels: &[_]| r.register_counter(&key(name, labels), &META);
        let gauge = |name, labels: &[_]| r.register_gauge(&key(name, labels), &META);
        let tier_gauges = |name| Tier::ALL.map(|t| gauge(name, &[("tier", t.as_str())]));
        let requests = Tier::ALL.map(|t| {
            OUTCOMES.map(|o| {
                counter(
                    "brownout_requests_total",
                    &[("tier", t.as_str()), ("outcome", o)],
                )
            })
        });
        let rejections = LimiterName::ALL.map(|l| {
            Tier::ALL.map(|t| {
                ["enforce", "dark"].map(|m| {
                    counter(
                        "brownout_rejections_total",
                        &[("limiter", l.as_str()), ("tier", t.as_str()), ("mode", m)],
                    )
                })
            })
        });
        let panics = LimiterName::ALL.map(|l| (l.as_str(), "panic"));
        for (limiter, reason) in panics.into_iter().chain(FAIL_OPEN_SERIES) {
            // Registered at zero, so alerts on rate() see the series before the first failure.
            counter(
                "brownout_fail_open_total",
                &[("limiter", limiter), ("reason", reason)],
            )
            .increment(0);
        }
        let limiter_mode = LimiterName::ALL.map(|l| {
            Mode::ALL.map(|m| {
                gauge(
                    "brownout_limiter_mode",
                    &[("limiter", l.as_str()), ("mode", m.as_str())],
                )
            })
        });
        gauge(
            "brownout_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))],
        )
        .set(1.0);
        Self {
            requests,
            request_counts: Sharded::default(),
            rejections,
            utilization: gauge("brownout_utilization_ratio", &[]),
            thresholds: THRESHOLDS
                .map(|t| gauge("brownout_utilization_threshold_ratio", &[("threshold", t)])),
            amount: gauge("brownout_shedding_amount", &[]),
            shed_probability: tier_gauges("brownout_shed_probability"),
            in_flight: tier_gauges("brownout_in_flight_requests"),
            expired: Tier::ALL
                .map(|t| counter("brownout_expired_requests_total", &[("tier", t.as_str())])),
            delayed: Tier::ALL
                .map(|t| counter("brownout_requests_delayed_total", &[("tier", t.as_str())])),
            delay: AtomicHistogram::new(&DELAY_BUCKETS),
            limiter_mode,
            concurrency_limit: gauge("brownout_concurrency_limit", &[]),
            concurrency_waiting: gauge("brownout_concurrency_waiting", &[]),
            concurrency_critical_share: gauge("brownout_concurrency_critical_share", &[]),
            capacity: gauge("brownout_capacity_requests", &[]),
            service_time: Tier::ALL
                .map(|t| gauge("brownout_service_time_seconds", &[("tier", t.as_str())])),
            kill_switch: gauge("brownout_kill_switch_engaged", &[]),
            decision: AtomicHistogram::new(&DECISION_BUCKETS),
            config_version: gauge("brownout_config_version", &[]),
            overrides_dropped: gauge("brownout_overrides_dropped", &[]),
            tracked_keys: LimiterName::ALL.map(|l| {
                l.tracks_keys()
                    .then(|| gauge("brownout_tracked_keys", &[("limiter", l.as_str())]))
            }),
            store_errors: LimiterName::ALL.map(|l| {
                l.tables().next().is_some().then(|| {
                    counter(
                        "brownout_store_errors_total",
                        &[("store", "memory"), ("op", l.as_str())],
                    )
                })
            }),
            admin_changes: ACTIONS
                .map(|a| counter("brownout_admin_changes_total", &[("action", a)])),
            totals: Default::default(),
            refused: Default::default(),
            recorder,
        }
    }

    /// Counts a request's outcome.
    #[inline]
    pub fn request(&self, tier: Tier, outcome: Outcome) {
        self.request_counts
            .add(tier.index() * 4 + outcome as usize, 1);
    }

    /// Counts a limiter's "no" (enforced, or dark).
    pub fn rejection(&self, limiter: LimiterName, tier: Tier, dark: bool) {
        self.rejections[limiter as usize][tier.index()][usize::from(dark)].increment(1);
        self.totals[limiter as usize][usize::from(dark)].fetch_add(1, Ordering::Relaxed);
        if !dark {
            self.refused[limiter as usize][tier.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a fail-open (a rare path: the handle is looked up by label).
    pub fn fail_open(&self, limiter: &'static str, reason: &'static str) {
        let k = key(
            "brownout_fail_open_total",
            &[("limiter", limiter), ("reason", reason)],
        );
        self.recorder.register_counter(&k, &META).increment(1);
        if let Some(l) = LimiterName::parse(limiter) {
            self.totals[l as usize][2].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records how long a decision took.
    pub fn decision_time(&self, elapsed: std::time::Duration) {
        self.decision
            .record_nanos(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Publishes the controller's state.
    pub fn publish_plan(&self, plan: &ShedPlan) {
        // The whole demand (2 at twice the capacity), not the controller's capped input.
        self.utilization.set(plan.demand);
        self.amount.set(plan.amount);
        for t in Tier::ALL {
            self.shed_probability[t.index()].set(plan.probability.get(t));
        }
    }

    /// Counts a request held `wait` for its turn (`excess: delay`).
    pub fn delayed(&self, tier: Tier, wait: std::time::Duration) {
        self.delayed[tier.index()].increment(1);
        let nanos = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
        self.delay.record_nanos(nanos);
    }

    /// Counts an admitted request that passed `limiters.deadline.after` unanswered.
    pub fn expired(&self, tier: Tier) {
        self.expired[tier.index()].increment(1);
    }

    /// Publishes adaptive_concurrency's limit, and how many requests wait for room under it.
    /// Publishes the capacity in force (pinned or learned; 0 until known) and each tier's
    /// service time (0 until seen).
    pub fn publish_capacity(&self, capacity: Option<f64>, service: [Option<Duration>; 4]) {
        self.capacity.set(capacity.unwrap_or(0.0));
        for (gauge, s) in self.service_time.iter().zip(service) {
            gauge.set(s.map_or(0.0, |d| d.as_secs_f64()));
        }
    }

    /// Publishes each route class's service time learned
    /// (`brownout_route_service_time_seconds{route, tier}`: `route` is the class's id, `0` to
    /// `63` in the order routes were first seen (`/v1/state` names them), `unmatched` or
    /// `other`; never a path). A class's gauge is registered when it is first learned.
    pub fn publish_routes(&self, classes: impl Iterator<Item = (RouteClass, Duration)>) {
        for (class, floor) in classes {
            let route = route_label(class.route());
            let key = key(
                "brownout_route_service_time_seconds",
                &[("route", route), ("tier", class.tier().as_str())],
            );
            self.recorder
                .register_gauge(&key, &META)
                .set(floor.as_secs_f64());
        }
    }

    pub fn publish_concurrency_limit(&self, limit: f64, waiting: u64, critical_share: f64) {
        self.concurrency_limit.set(limit);
        self.concurrency_waiting.set(waiting as f64);
        self.concurrency_critical_share.set(critical_share);
    }

    /// Publishes modes, the kill switch and the config version.
    pub fn publish_settings(
        &self,
        modes: [Mode; LimiterName::COUNT],
        kill_switch: bool,
        version: u64,
    ) {
        for (limiter, mode) in modes.iter().enumerate() {
            for (i, m) in Mode::ALL.iter().enumerate() {
                self.limiter_mode[limiter][i].set(if m == mode { 1.0 } else { 0.0 });
            }
        }
        self.kill_switch.set(if kill_switch { 1.0 } else { 0.0 });
        self.config_version.set(version as f64);
    }

    /// Publishes how many saved admin changes the overrides file held at start that are not
    /// in force (`/v1/state` names them).
    pub(crate) fn publish_overrides_dropped(&self, dropped: usize) {
        self.overrides_dropped.set(dropped as f64);
    }

    /// Publishes the worker-utilization controller's thresholds in force
    /// (`limiters.worker_utilization.end_of_good` and `start_of_bad`), so that dashboards draw
    /// the live values (set when the settings change, never per request).
    pub fn publish_thresholds(&self, end_of_good: f64, start_of_bad: f64) {
        for (gauge, value) in self.thresholds.iter().zip([end_of_good, start_of_bad]) {
            gauge.set(value);
        }
    }

    /// Counts a store call that failed (the limiter then failed open).
    pub fn store_error(&self, limiter: LimiterName) {
        if let Some(c) = &self.store_errors[limiter as usize] {
            c.increment(1);
        }
    }

    /// Counts a failed call to a shared store (a rare path: the handle is looked up by label).
    #[cfg(feature = "redis")]
    pub fn shared_store_error(&self, store: &'static str, op: &'static str) {
        let k = key(
            "brownout_store_errors_total",
            &[("store", store), ("op", op)],
        );
        self.recorder.register_counter(&k, &META).increment(1);
    }

    /// Publishes how many undo operations the shared store dropped (its queue was full, or a
    /// release that failed was kept a permit TTL or past the most kept).
    #[cfg(feature = "redis")]
    pub fn publish_undo_dropped(&self, store: &'static str, dropped: u64) {
        let k = key(
            "brownout_store_errors_total",
            &[("store", store), ("op", "undo_dropped")],
        );
        self.recorder.register_counter(&k, &META).absolute(dropped);
    }

    /// Publishes the shared store's circuit breaker: 0 closed, 1 open, 2 half-open.
    #[cfg(feature = "redis")]
    pub fn publish_breaker(&self, store: &'static str, state: f64) {
        let k = key("brownout_store_breaker_state", &[("store", store)]);
        self.recorder.register_gauge(&k, &META).set(state);
    }

    /// Counts an accepted admin change.
    pub fn admin_change(&self, action: &str) {
        if let Some(i) = ACTIONS.iter().position(|a| *a == action) {
            self.admin_changes[i].increment(1);
        }
    }

    /// Publishes how many keys `limiter` tracks (`brownout_tracked_keys{limiter}`).
    pub fn publish_tracked_keys(&self, limiter: LimiterName, keys: usize) {
        if let Some(gauge) = &self.tracked_keys[limiter as usize] {
            gauge.set(keys as f64);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self, in_flight: &InFlight) -> String {
        let now = in_flight.per_tier();
        for t in Tier::ALL {
            self.in_flight[t.index()].set(now.get(t) as f64);
        }
        for t in Tier::ALL {
            for (o, counter) in self.requests[t.index()].iter().enumerate() {
                let n = self.request_counts.sum(t.index() * 4 + o);
                counter.absolute(u64::try_from(n).unwrap_or(0));
            }
        }
        let handle = self.recorder.handle();
        handle.run_upkeep();
        let mut text = handle.render();
        self.decision.render(DECISION, DECISION_HELP, &mut text);
        self.delay.render(DELAY, DELAY_HELP, &mut text);
        text
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
