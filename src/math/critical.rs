//! The share of critical clients adaptive_concurrency admits when critical demand alone
//! overflows its ceiling (pure): multiplicative decrease while the ceiling is hit, slow
//! increase at the limit, fast return once critical requests find room; and the limit the
//! ceiling is a multiple of ([`CeilingBase`]).

use super::adaptive::Window;

/// What the critical requests of one window met, for the share of critical cohorts admitted
/// (in the spirit of DAGOR's admission level: the business priority is the tier, the user
/// priority a client's cohort score).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CriticalPressure {
    /// One was refused at the ceiling: more critical work than the server answers in time.
    Overflowed,
    /// None was refused, but one was let in with the limit full: the critical demand is at
    /// about what the server answers.
    AtLimit,
    /// Every one found room under the limit.
    Clear,
}

/// Each window with [`CriticalPressure::Overflowed`] multiplies the share by this.
pub const CRITICAL_BACKOFF: f64 = 0.9;

/// Each window at the limit without overflow gives this much share back (slowly: the share
/// found is near what the server answers).
pub const CRITICAL_STEP: f64 = 0.05;

/// Each clear window gives this much back (four windows, a second by default, bring any share
/// back to everyone).
pub const CRITICAL_RELEASE: f64 = 0.25;

/// The share never falls below this: some critical traffic is always let in to measure by.
pub const CRITICAL_MIN_SHARE: f64 = 0.05;

/// The share of critical cohorts admitted after a window that met `pressure`, from `share`.
pub fn critical_share(share: f64, pressure: CriticalPressure) -> f64 {
    let next = match pressure {
        CriticalPressure::Overflowed => share * CRITICAL_BACKOFF,
        CriticalPressure::AtLimit => share + CRITICAL_STEP,
        CriticalPressure::Clear => share + CRITICAL_RELEASE,
    };
    next.clamp(CRITICAL_MIN_SHARE, 1.0)
}

/// Once the capacity is known, the ceiling lets in at least this much service time (µs)
/// queued ahead of a critical request (see [`CeilingBase::update`]).
pub const CRITICAL_QUEUE_US: f64 = 500_000.0;

/// Once the capacity is known, the most time (µs) a critical request is let in to spend in
/// the app, its queue and its own service: see [`ceiling_cap`].
pub const CRITICAL_LATENCY_US: f64 = 750_000.0;

/// The most requests in flight at which a critical request is still let in, once the
/// capacity is known (`None`: no bound): the capacity and [`CRITICAL_QUEUE_US`] of queue
/// ahead of it, less where its service time leaves less than that of
/// [`CRITICAL_LATENCY_US`]. The ceiling is otherwise `critical_ceiling` times the limit, and
/// the limit, learned calm, is room for bursts: at a 10C spike on 100 × 500 ms (critical
/// requests alone the capacity) it was 182, the ceiling 728, and critical requests queued
/// past their clients' 1 s deadline for five seconds while the app ran the abandoned ones
/// (`bench overload`: 70% served). Capped, they wait at most a quarter of a second there, and
/// half a second on an app of 250 ms or faster.
///
/// `known`: the capacity (requests at once) and the mean service time (µs) it is read at.
pub fn ceiling_cap(known: Option<(f64, f64)>) -> f64 {
    match known {
        Some((capacity, service_us)) if service_us > 0.0 && capacity > 0.0 => {
            let queue = (CRITICAL_LATENCY_US - service_us).clamp(0.0, CRITICAL_QUEUE_US);
            capacity * (1.0 + queue / service_us)
        }
        _ => f64::INFINITY,
    }
}

/// The critical ceiling: `times` (`critical_ceiling`) the higher of the limit and its `base`,
/// at most `cap` ([`ceiling_cap`]) — but never below the limit: a critical request is let in
/// wherever a request of a lower tier would be (capped under the limit, 100 × 500 ms refused
/// 15 critical requests at 2C while its limit, learned calm, still let GETs in).
pub fn ceiling(limit: f64, base: f64, times: f64, cap: f64) -> f64 {
    (base.max(limit) * times).min(cap).max(limit)
}

/// The app's learned capacity (requests at once), its mean service time (µs) and
/// `critical_ceiling`, for the ceiling's base.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Known {
    pub capacity: f64,
    pub service_us: f64,
    pub ceiling: f64,
}

/// The limit the critical ceiling is a multiple of: the limit learned (outside a probe);
/// while the app's capacity is not known yet, the higher of it and the previous window's
/// when that window ended within the last mean latency. Until the capacity is known the
/// limit doubles and halves (slow start, `math::adaptive`): it overshoots, lets a burst in,
/// and halves every window after, faster than the requests it let in drain; those leftovers
/// are not critical demand overflowing, and a ceiling that fell with the limit would refuse
/// critical requests at a fraction of the capacity. Once the capacity is known the limit
/// stays above half of it and moves gently, and the ceiling follows it at once: a true
/// critical overflow is answered without delay. A window in which nothing finished drained
/// nothing: what the previous window let in may still be in flight. Once the capacity is
/// known the ceiling is at least the capacity and [`CRITICAL_QUEUE_US`] of queue: critical
/// requests go past the limit, their own queue cuts it, and a ceiling cut with it refused
/// critical requests the workers could serve in time. Nor is the cap below the limit of the
/// window before, if that ended within the last mean latency (at most a window back, as in
/// slow start): the lower tiers let in under it are still in flight (when
/// the capacity is first learned at a step into overload, the cap falls from none to below
/// the limit the step was let in under, and 100 × 500 ms refused critical requests for the
/// second those drained).
#[derive(Debug, Clone, Default)]
pub struct CeilingBase {
    /// The previous window's end (µs), the limit learned then, and whether it was in slow
    /// start.
    previous: Option<(u64, f64, bool)>,
    /// [`ceiling_cap`] as of the last window (`None`: none yet, no cap).
    cap: Option<f64>,
    /// The previous window's limit if it ended within the last mean latency (0 else).
    recent: f64,
}

impl CeilingBase {
    /// Remembers `learned`, the limit learned at the end of `w` (`known`: `None` while the
    /// app's capacity is not known), and returns the base.
    pub fn update(&mut self, w: &Window, learned: f64, known: Option<Known>) -> f64 {
        let previous = self.previous.replace((w.at, learned, known.is_none()));
        let since = w.mean().map_or(0, |mean| w.at.saturating_sub(mean as u64));
        // The previous window's limit, if it ended within the last mean latency.
        let recent = previous.filter(|&(at, _, _)| at >= since);
        self.cap = Some(ceiling_cap(known.map(|k| (k.capacity, k.service_us))));
        self.recent = recent.map_or(0.0, |(_, limit, _)| limit);
        let Some(k) = known else {
            return match recent {
                Some((_, limit, true)) => learned.max(limit),
                _ => learned,
            };
        };
        let queue = if k.service_us > 0.0 {
            CRITICAL_QUEUE_US / k.service_us
        } else {
            0.0
        };
        learned.max(k.capacity * (1.0 + queue) / k.ceiling.max(1.0))
    }

    /// The most in flight at which a critical request is let in: [`ceiling_cap`], or the
    /// limit of the last mean latency where that is more.
    pub fn cap(&self) -> f64 {
        self.in_time().max(self.recent)
    }

    /// [`ceiling_cap`] alone: the most in flight at which a critical request is answered in
    /// time (what the lower tiers keep room under, `CapacityEstimate::lane`).
    pub fn in_time(&self) -> f64 {
        self.cap.unwrap_or(f64::INFINITY)
    }
}

#[cfg(test)]
#[path = "critical_tests.rs"]
mod tests;
