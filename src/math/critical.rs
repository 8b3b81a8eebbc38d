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

/// The limit the critical ceiling is a multiple of: the limit learned (outside a probe);
/// while the app's capacity is not known yet, the higher of it and the previous window's
/// when that window ended within the last mean latency. Until the capacity is known the
/// limit doubles and halves (slow start, `math::adaptive`): it overshoots, lets a burst in,
/// and halves every window after, faster than the requests it let in drain; those leftovers
/// are not critical demand overflowing, and a ceiling that fell with the limit would refuse
/// critical requests at a fraction of the capacity. Once the capacity is known the limit
/// stays above half of it and moves gently, and the ceiling follows it at once: a true
/// critical overflow is answered without delay. A window in which nothing finished drained
/// nothing: what the previous window let in may still be in flight.
#[derive(Debug, Clone, Default)]
pub struct CeilingBase {
    /// The previous window's end (µs) and the limit learned then, in slow start.
    previous: Option<(u64, f64)>,
}

impl CeilingBase {
    /// Remembers `learned`, the limit learned at the end of `w` (`slow_start`: the app's
    /// capacity is not known yet), and returns the base.
    pub fn update(&mut self, w: &Window, learned: f64, slow_start: bool) -> f64 {
        let previous = std::mem::replace(&mut self.previous, slow_start.then_some((w.at, learned)));
        let since = w.mean().map_or(0, |mean| w.at.saturating_sub(mean as u64));
        match previous {
            Some((at, limit)) if slow_start && at >= since => learned.max(limit),
            _ => learned,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(at_ms: u64, mean_ms: Option<u64>) -> Window {
        let mut w = Window {
            at: at_ms * 1000,
            ..Window::default()
        };
        if let Some(mean) = mean_ms {
            w.count[0] = 10;
            w.sum[0] = 10 * mean * 1000;
        }
        w
    }

    #[test]
    fn the_ceiling_base_falls_no_faster_than_what_was_let_in_drains() {
        let mut base = CeilingBase::default();
        // In slow start, a limit of 40 meets a queue and halves every 100 ms window while the
        // requests it let in take up to 200 ms: the base keeps the limits of the last mean
        // latency.
        assert_eq!(base.update(&window(100, Some(20)), 40.0, true), 40.0);
        assert_eq!(base.update(&window(200, Some(190)), 20.0, true), 40.0);
        assert_eq!(base.update(&window(300, Some(60)), 10.0, true), 10.0);
        // Never more than a window back, however long the latency.
        assert_eq!(base.update(&window(400, Some(900)), 5.0, true), 10.0);
        assert_eq!(base.update(&window(500, Some(900)), 2.5, true), 5.0);
        // The queue drained: latency back at the service time, the base is the limit.
        assert_eq!(base.update(&window(600, Some(20)), 2.0, true), 2.0);
        // It never stands below the limit learned now.
        assert_eq!(base.update(&window(700, Some(20)), 6.0, true), 6.0);
        // Nothing finished in a window: every remembered limit may still be in flight.
        assert_eq!(base.update(&window(800, None), 3.0, true), 6.0);
        // Once the capacity is known, the base is the limit learned now, whatever came before.
        assert_eq!(base.update(&window(900, Some(900)), 2.0, false), 2.0);
        assert_eq!(base.update(&window(1000, None), 1.5, true), 1.5);
    }

    #[test]
    fn the_critical_share_backs_off_on_overflow_and_comes_back() {
        use CriticalPressure::*;
        assert!((critical_share(1.0, Overflowed) - 0.9).abs() < 1e-12);
        assert!((critical_share(0.9, Overflowed) - 0.81).abs() < 1e-12);
        assert!((critical_share(0.81, AtLimit) - 0.86).abs() < 1e-12);
        assert_eq!(critical_share(0.99, AtLimit), 1.0, "never above everyone");
        assert_eq!(critical_share(0.055, Overflowed), CRITICAL_MIN_SHARE);
        // From the floor, four clear windows let everyone in again.
        let mut share = CRITICAL_MIN_SHARE;
        for _ in 0..4 {
            share = critical_share(share, Clear);
        }
        assert_eq!(share, 1.0);
    }
}
