//! Help texts, and the fleet settings' series (registered when they first change).

use super::{key, Metrics, META};
use metrics::{KeyName, Recorder};
use metrics_exporter_prometheus::PrometheusRecorder;

impl Metrics {
    /// Counts a fleet settings document read: `applied` or `rejected`.
    #[cfg(feature = "redis")]
    pub fn fleet_settings(&self, result: &'static str) {
        let k = key("brownout_fleet_settings_total", &[("result", result)]);
        self.recorder.register_counter(&k, &META).increment(1);
    }

    /// Publishes whether this instance runs the fleet's settings.
    pub fn publish_fleet_in_sync(&self, in_sync: bool) {
        let k = key("brownout_fleet_settings_in_sync", &[]);
        self.recorder
            .register_gauge(&k, &META)
            .set(if in_sync { 1.0 } else { 0.0 });
    }
}

pub(super) fn describe(r: &PrometheusRecorder) {
    let counters = [
        ("brownout_requests_total", "Requests seen by the middleware, by tier and outcome (allowed, rejected, dark_rejected, failed_open)."),
        ("brownout_rejections_total", "Rejections by limiter, tier and mode; mode=dark counts requests a dark-launched limiter would have rejected."),
        ("brownout_store_errors_total", "Failed calls to the keyed-state store (full table, timeout, error), by store and operation; op=undo_dropped counts releases the shared store dropped."),
        ("brownout_admin_changes_total", "Accepted admin changes, by action (mode, kill_switch, patch, revert, reload)."),
        ("brownout_fail_open_total", "Times a limiter or source failed and the request was let through, by limiter and reason."),
        ("brownout_fleet_settings_total", "Fleet settings documents this instance read from Redis, by result: applied, or rejected (they fail its validation; it keeps its settings)."),
        ("brownout_requests_delayed_total", "Requests request_rate held for their turn in their client's bucket (excess: delay), by tier."),
        ("brownout_expired_requests_total", "Admitted requests still unanswered after limiters.deadline.after, by tier: they stopped counting against in-flight limits (and with deadline.cancel were stopped and answered 503). A request that passes straight through (see brownout_in_flight_requests) is not timed."),
    ];
    for (name, help) in counters {
        r.describe_counter(KeyName::from(name), None, help.into());
    }
    let gauges = [
        (
            "brownout_utilization_ratio",
            "Demand the worker-utilization controller last read, 0 and up: the sources' reading with what the controller shed added back as work (in_flight: work offered over capacity, 1 exactly at capacity, about 2 at twice it, 0 until the capacity is known). The controller's own input is this without its shedding, capped at 1; it compares it with brownout_utilization_threshold_ratio.",
        ),
        (
            "brownout_utilization_threshold_ratio",
            "The worker-utilization controller's thresholds in force (limiters.worker_utilization), by threshold: below end_of_good its input lets shedding recover, from start_of_bad on shedding grows, in between it holds.",
        ),
        (
            "brownout_shedding_amount",
            "The worker-utilization controller's shedding amount, from its resting value (-seconds_before_shedding / seconds_to_shed_all) up to 1: 0 or below sheds nothing; limiters.worker_utilization.bands map it to each tier's drop probability.",
        ),
        (
            "brownout_shed_probability",
            "Probability (0..1) that the worker-utilization shedder drops a request of the tier (each tier's band at the shedding amount, capped by max_shed; critical 0 unless shed_critical).",
        ),
        (
            "brownout_in_flight_requests",
            "Requests let in and not yet answered, by tier (those waiting in adaptive_concurrency's queue and those past limiters.deadline.after are not counted; with worker_utilization and adaptive_concurrency both off, neither is a request that holds no permit and writes no RateLimit field: it passes straight through).",
        ),
        (
            "brownout_limiter_mode",
            "1 for each limiter's configured mode (enforce, dark, off), 0 otherwise; while brownout_kill_switch_engaged is 1, every limiter runs off whatever this says.",
        ),
        (
            "brownout_concurrency_limit",
            "The limit adaptive_concurrency admits non-critical requests in flight under (learned from their latency).",
        ),
        (
            "brownout_concurrency_waiting",
            "Requests waiting for room under adaptive_concurrency's limit (its queue), at the last window's end.",
        ),
        (
            "brownout_concurrency_critical_share",
            "The share of critical clients (by cohort) adaptive_concurrency admits: 1 unless critical demand alone overflowed critical_ceiling times the limit.",
        ),
        (
            "brownout_capacity_requests",
            "Requests the app serves at once that worker_utilization reads demand against: pinned by worker_utilization.capacity, else learned from what the app was seen to serve when saturated (0 until then). Published at the end of each adaptive_concurrency window (0 while it is off).",
        ),
        (
            "brownout_service_time_seconds",
            "What a request of the tier takes in the app without a queue, in seconds, learned by adaptive_concurrency from the requests the app served (0 until seen, and while adaptive_concurrency is off).",
        ),
        (
            "brownout_route_service_time_seconds",
            "What a request of the route class (a route, by its id in /v1/state's route_classes, in a tier) takes in the app without a queue, in seconds, learned by adaptive_concurrency; route is 0..63, unmatched (the router's 404/405) or other.",
        ),
        (
            "brownout_store_breaker_state",
            "The shared store's circuit breaker: 0 closed (calls go to Redis), 1 open (limits decided locally), 2 half-open (one probe out).",
        ),
        (
            "brownout_kill_switch_engaged",
            "1 while the global kill switch turns every limiter off.",
        ),
        (
            "brownout_config_version",
            "Version of the live settings; bumped by every accepted change (with admin.scope fleet: the fleet's version this instance runs).",
        ),
        (
            "brownout_overrides_dropped",
            "Saved admin changes the overrides file held at start that are not in force (a value that no longer validates beside config.yaml, an unreadable file): GET /v1/state names each one. 0 when all were restored.",
        ),
        (
            "brownout_fleet_settings_in_sync",
            "With admin.scope fleet: 1 while this instance runs the fleet's settings, 0 while it runs local changes or refused the fleet's latest (always 1 with admin.scope local).",
        ),
        (
            "brownout_build_info",
            "Always 1; the version label carries the brownout version.",
        ),
        (
            "brownout_tracked_keys",
            "Client keys the keyed limiters hold state for, by limiter (bounded by max_keys).",
        ),
    ];
    for (name, help) in gauges {
        r.describe_gauge(KeyName::from(name), None, help.into());
    }
}
