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
/// critical requests the workers could serve in time.
#[derive(Debug, Clone, Default)]
pub struct CeilingBase {
    /// The previous window's end (µs) and the limit learned then, in slow start.
    previous: Option<(u64, f64)>,
}

impl CeilingBase {
    /// Remembers `learned`, the limit learned at the end of `w` (`known`: `None` while the
    /// app's capacity is not known), and returns the base.
    pub fn update(&mut self, w: &Window, learned: f64, known: Option<Known>) -> f64 {
        let slow_start = known.is_none();
        let previous = std::mem::replace(&mut self.previous, slow_start.then_some((w.at, learned)));
        let since = w.mean().map_or(0, |mean| w.at.saturating_sub(mean as u64));
        let Some(k) = known else {
            return match previous {
                Some((at, limit)) if at >= since => learned.max(limit),
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
}

#[cfg(test)]
#[path = "critical_tests.rs"]
mod tests;
