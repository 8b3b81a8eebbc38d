//! Injected time: a monotonic [`Clock`] with a system and a manual implementation.
//!
//! The only module that reads the system clock (clippy's `disallowed-methods` refuses
//! `Instant::now` and `SystemTime::now` everywhere else).
#![allow(clippy::disallowed_methods)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonic clock. Readings are durations since the clock's own origin, so they fit in a
/// `u64` of nanoseconds and can be stored in atomics by the limiters.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The time elapsed since this clock's origin.
    fn now(&self) -> Duration;

    /// The clock's origin as time since the Unix epoch, so that `unix_origin() + now()` is the
    /// wall-clock time. Calendar-aligned windows (quotas) read it; the default is the epoch
    /// itself.
    fn unix_origin(&self) -> Duration {
        Duration::ZERO
    }
}

/// The real monotonic clock. It reads the CPU's invariant TSC through quanta (a few ns
/// instead of a `clock_gettime` call, which costs ~30 ns on a VM and is read twice per
/// request), and falls back to the OS clock where the TSC is not usable.
#[derive(Debug, Clone)]
pub struct SystemClock {
    clock: quanta::Clock,
    origin: u64,
    unix_origin: Duration,
}

impl SystemClock {
    /// A clock whose origin is the moment of this call.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        let unix_origin = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self {
            clock,
            origin,
            unix_origin,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        let raw = self.clock.raw();
        Duration::from_nanos(self.clock.delta_as_nanos(self.origin, raw))
    }

    fn unix_origin(&self) -> Duration {
        self.unix_origin
    }
}

/// A clock that only moves when told to; for tests (yours and ours).
///
/// # Examples
/// ```
/// use brownout::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_secs(8));
/// assert_eq!(clock.now(), Duration::from_secs(8));
/// ```
#[derive(Debug, Default)]
pub struct ManualClock {
    nanos: AtomicU64,
    unix_origin: AtomicU64,
}

impl ManualClock {
    /// A clock standing at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.nanos.fetch_add(nanos(by), Ordering::SeqCst);
    }

    /// Sets the clock to `to` (it may move backwards: the limiters must tolerate that).
    pub fn set(&self, to: Duration) {
        self.nanos.store(nanos(to), Ordering::SeqCst);
    }

    /// Says which wall-clock time (since the Unix epoch) the clock's zero stands for
    /// (default: the epoch itself).
    pub fn set_unix_origin(&self, origin: Duration) {
        self.unix_origin.store(nanos(origin), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }

    fn unix_origin(&self) -> Duration {
        Duration::from_nanos(self.unix_origin.load(Ordering::SeqCst))
    }
}

/// Saturating conversion of a duration to whole nanoseconds.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[path = "clock_tests.rs"]
mod tests;
