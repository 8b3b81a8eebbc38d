//! `limiters.worker_utilization:` — the worker-utilization shedder's settings and their
//! validation.

use crate::control::{probabilities, ControllerParams};
use crate::schema::validate::{
    duration, ensure, seconds, share, Valid, Num, MIN_SHARE, MS_TO_A_DAY,
};
use crate::schema::{Bands, ConfigError, HumanDuration, MaxShed, Mode, Selection, SourceKind};
use crate::tier::{PerTier, Tier};
use serde::{Deserialize, Serialize};

/// `limiters.worker_utilization:` — Stripe's worker-utilization load shedder.
///
/// # Examples
/// ```
/// use brownout::config::SourceKind;
/// use brownout::Config;
///
/// let config = Config::from_yaml_str(
///     "limiters:
///   worker_utilization:
///     source: in_flight
///     capacity: 16
///     sample_interval: 2s
///     seconds_before_shedding: 10
///     seconds_to_shed_all: 60
/// ",
/// )?;
/// let wu = &config.limiters.worker_utilization;
/// assert_eq!((wu.source, wu.capacity), (SourceKind::InFlight, Some(16)));
/// assert_eq!((wu.end_of_good, wu.start_of_bad), (0.9, 0.97));
/// # Ok::<(), brownout::Report>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct WorkerUtilizationConfig {
    /// enforce | dark | off.
    pub mode: Mode,
    /// in_flight | cpu | runtime | custom | max.
    pub source: SourceKind,
    /// With `source: max`, the sources to take the maximum of.
    pub sources: Vec<SourceKind>,
    /// Requests the app serves at once that mean 100% utilization (`source: in_flight`):
    /// `None` (the default) learns it from what the app is seen to serve; a number pins it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// How often utilization is sampled.
    pub sample_interval: HumanDuration,
    /// Below this utilization, shedding recovers.
    pub end_of_good: f64,
    /// At or above this utilization, shedding grows.
    pub start_of_bad: f64,
    /// How long a fully bad server waits before shedding anything.
    pub seconds_before_shedding: f64,
    /// How long a fully bad server takes to go from shedding nothing to everything.
    pub seconds_to_shed_all: f64,
    /// Where on the amount scale each tier is shed.
    pub bands: Bands,
    /// Let this limiter shed critical traffic too (needs `bands.critical`).
    pub shed_critical: bool,
    /// Upper bound of each tier's drop probability.
    pub max_shed: MaxShed,
    /// random | cohort.
    pub selection: Selection,
    /// How long one cohort is shed before another is chosen.
    pub cohort_rotation: HumanDuration,
    /// `Retry-After` of a shed request (default: one `sample_interval`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<HumanDuration>,
}

impl Default for WorkerUtilizationConfig {
    fn default() -> Self {
        // Stripe's thresholds and time constants, kept once, by the controller.
        let stripe = ControllerParams::default();
        Self {
            mode: Mode::Enforce,
            source: SourceKind::InFlight,
            sources: Vec::new(),
            capacity: None,
            sample_interval: HumanDuration::from_secs(8),
            end_of_good: END_OF_GOOD,
            start_of_bad: START_OF_BAD,
            seconds_before_shedding: stripe.seconds_before_shedding,
            seconds_to_shed_all: stripe.seconds_to_shed_all,
            bands: Bands::default(),
            shed_critical: false,
            max_shed: MaxShed::default(),
            selection: Selection::Random,
            cohort_rotation: HumanDuration::from_secs(300),
            retry_after: None,
        }
    }
}

impl WorkerUtilizationConfig {
    /// The controller's parameters of this (validated) block.
    pub(crate) fn controller(&self) -> ControllerParams {
        ControllerParams {
            end_of_good: self.end_of_good,
            start_of_bad: self.start_of_bad,
            seconds_before_shedding: self.seconds_before_shedding,
            seconds_to_shed_all: self.seconds_to_shed_all,
        }
    }

    /// Each tier's drop probability at the controller's `amount` (see
    /// [`probabilities`](crate::control::probabilities)).
    pub(crate) fn probabilities(&self, amount: f64) -> PerTier<f64> {
        probabilities(amount, &self.bands, &self.max_shed, self.shed_critical)
    }
}

const WU: &str = "limiters.worker_utilization";

/// The default thresholds. Stripe's (0.7 and 0.8 of a worker pool's busy share) would hold
/// the work let past at about three quarters of what the app serves; against a capacity
/// learned as what the app really serves at once, the dead zone sits just below it, and the
/// fast guard trims what is left.
pub const END_OF_GOOD: f64 = 0.9;
/// See [`END_OF_GOOD`].
pub const START_OF_BAD: f64 = 0.97;

/// Longest `sample_interval`: the controller moves once per interval.
pub(super) const MAX_SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

impl WorkerUtilizationConfig {
    /// Checks the worker-utilization block.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_worker_utilization(self)
    }
}

/// The range of `end_of_good`: below it the controller would recover only when idle, above
/// it the dead zone would have no room.
const END_OF_GOOD_RANGE: (f64, f64) = (0.05, 0.98);
/// The highest `start_of_bad`: closer to 1, a single busy sample would shed at full speed.
const MAX_START_OF_BAD: f64 = 0.99;
/// The longest `seconds_before_shedding` and `seconds_to_shed_all`.
const MAX_CONTROLLER_SECONDS: f64 = 86_400.0;
/// The most `capacity` may pin.
const MAX_CAPACITY: u32 = 1_000_000;

/// Checks the worker-utilization block.
pub(crate) fn validate_worker_utilization(w: &WorkerUtilizationConfig) -> Valid {
    let key = |k: &str| format!("{WU}.{k}");
    let (low, high) = END_OF_GOOD_RANGE;
    ensure(
        w.end_of_good.is_finite() && (low..=high).contains(&w.end_of_good),
        &key("end_of_good"),
        format!(
            "must be between {low} and {high} (got {})",
            Num(w.end_of_good)
        ),
    )?;
    ensure(
        w.start_of_bad.is_finite() && w.start_of_bad >= w.end_of_good + MIN_SHARE - 1e-9,
        &key("start_of_bad"),
        format!(
            "must be greater than end_of_good by at least {MIN_SHARE} ({} is not greater than {} by {MIN_SHARE})",
            Num(w.start_of_bad), Num(w.end_of_good)
        ),
    )?;
    ensure(
        w.start_of_bad <= MAX_START_OF_BAD,
        &key("start_of_bad"),
        format!("must be at most {MAX_START_OF_BAD} (got {})", Num(w.start_of_bad)),
    )?;
    let interval = w.sample_interval.get();
    duration(
        interval,
        &key("sample_interval"),
        (std::time::Duration::from_millis(1), MAX_SAMPLE_INTERVAL),
    )?;
    // Each step of the controller is capped at seconds_before_shedding: 0 would never move.
    let least = interval.as_secs_f64().min(1.0);
    ensure(
        w.seconds_before_shedding.is_finite()
            && (least..=MAX_CONTROLLER_SECONDS).contains(&w.seconds_before_shedding),
        &key("seconds_before_shedding"),
        format!(
            "must be between {least} (1 second, or one sample_interval if shorter) and {MAX_CONTROLLER_SECONDS} seconds (got {}): each step of the controller is capped at it, so a shorter one would stop it",
            Num(w.seconds_before_shedding)
        ),
    )?;
    seconds(
        w.seconds_to_shed_all,
        &key("seconds_to_shed_all"),
        (0.001, MAX_CONTROLLER_SECONDS),
    )?;
    ensure(
        w.capacity.is_none_or(|c| (1..=MAX_CAPACITY).contains(&c)),
        &key("capacity"),
        format!("must be between 1 and {MAX_CAPACITY} (or left out: learned from what the app serves)"),
    )?;
    duration(w.cohort_rotation.get(), &key("cohort_rotation"), MS_TO_A_DAY)?;
    if let Some(r) = w.retry_after {
        duration(r.get(), &key("retry_after"), MS_TO_A_DAY)?;
    }
    for tier in Tier::ALL {
        share(w.max_shed.get(tier), &key(&format!("max_shed.{tier}")))?;
    }
    validate_sources(w)?;
    validate_bands(w)
}

fn validate_sources(w: &WorkerUtilizationConfig) -> Valid {
    // The cpu source reads the process's CPU time through sysinfo: only with the feature.
    if !cfg!(feature = "cpu") {
        let needs = "is cpu, which needs brownout's `cpu` feature: add features = [\"cpu\"] to \
                     brownout's line in Cargo.toml, or pick another source";
        ensure(w.source != SourceKind::Cpu, &format!("{WU}.source"), needs)?;
        let listed = w.source == SourceKind::Max && w.sources.contains(&SourceKind::Cpu);
        let needs = needs.replacen("is cpu", "lists cpu", 1);
        ensure(!listed, &format!("{WU}.sources"), needs)?;
    }
    let key = format!("{WU}.sources");
    if w.source == SourceKind::Max {
        ensure(
            !w.sources.is_empty(),
            &key,
            "must list at least one source when source is max",
        )?;
        ensure(
            !w.sources.contains(&SourceKind::Max),
            &key,
            "cannot contain max",
        )?;
    }
    Ok(())
}

fn validate_bands(w: &WorkerUtilizationConfig) -> Valid {
    let b = &w.bands;
    let key = |k: &str| format!("{WU}.bands.{k}");
    const EPS: f64 = 1e-9;
    let ordered = [("test", b.test), ("get", b.get), ("post", b.post)];
    let mut expected_start = 0.0;
    for (name, [start, end]) in ordered {
        ensure(
            start.is_finite() && end.is_finite() && end - start >= MIN_SHARE - EPS,
            &key(name),
            format!(
                "must be [start, end] with end at least {MIN_SHARE} above start (got [{}, {}])",
                Num(start),
                Num(end)
            ),
        )?;
        ensure(
            (start - expected_start).abs() < EPS,
            &key(name),
            format!(
                "must start where the previous band ends ({expected_start}); bands must cover [0, 1] in order test, get, post"
            ),
        )?;
        expected_start = end;
    }
    ensure(
        (expected_start - 1.0).abs() < EPS,
        &key("post"),
        "must end at 1; bands must cover [0, 1] in order test, get, post",
    )?;
    match b.critical {
        Some([start, end]) => ensure(
            start.is_finite()
                && end.is_finite()
                && (start == 0.0 || start >= MIN_SHARE)
                && end - start >= MIN_SHARE - EPS
                && end <= 1.0,
            &key("critical"),
            format!(
                "must be within [0, 1], start 0 or at least {MIN_SHARE}, end at least {MIN_SHARE} above start (got [{}, {}])",
                Num(start),
                Num(end)
            ),
        ),
        None => ensure(
            !w.shed_critical,
            &key("critical"),
            "is required when shed_critical is true",
        ),
    }
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
