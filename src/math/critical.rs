//! The share of critical clients adaptive_concurrency admits when critical demand alone
//! overflows its ceiling (pure): multiplicative decrease while the ceiling is hit, slow
//! increase at the limit, fast return once critical requests find room.

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

#[cfg(test)]
mod tests {
    use super::*;

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
