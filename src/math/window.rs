//! Window quotas ("3 failed card attempts per day"): fixed windows and the sliding-window
//! counter, which weights the previous window's count by the share of it still inside the
//! sliding window. State per key is packed in 48 bits: window id (16, wrapping), this window's
//! count (16), the previous window's count (16). Times are microseconds.

use crate::schema::QuotaAlgorithm;

/// A quota's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRule {
    /// fixed or sliding.
    pub algorithm: QuotaAlgorithm,
    /// Most requests per window.
    pub limit: u32,
    /// Window length in µs.
    pub window: u64,
}

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowCheck {
    /// Whether it fits.
    pub allowed: bool,
    /// Requests left in the window after this one.
    pub remaining: u32,
    /// µs until the current window ends.
    pub reset: u64,
    /// µs until a request would fit (0 when allowed).
    pub retry: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Counts {
    id: u16,
    current: u16,
    previous: u16,
}

fn unpack(v: u64) -> Counts {
    Counts {
        id: (v >> 32) as u16,
        current: (v >> 16) as u16,
        previous: v as u16,
    }
}

fn pack(c: Counts) -> u64 {
    (u64::from(c.id) << 32) | (u64::from(c.current) << 16) | u64::from(c.previous)
}

/// The counts as of window `id`.
fn roll(v: u64, id: u64) -> Counts {
    let c = unpack(v);
    let id16 = id as u16;
    if c.id == id16 {
        c
    } else if c.id == id16.wrapping_sub(1) {
        Counts {
            id: id16,
            current: 0,
            previous: c.current,
        }
    } else {
        Counts {
            id: id16,
            current: 0,
            previous: 0,
        }
    }
}

impl WindowRule {
    fn estimate(&self, c: Counts, elapsed: u64) -> f64 {
        match self.algorithm {
            QuotaAlgorithm::FixedWindow => f64::from(c.current),
            // A log's rule answered from a counter (a store that keeps no log for it, such
            // as an app's own that predates logs) reads as its nearest estimate.
            QuotaAlgorithm::SlidingWindow | QuotaAlgorithm::SlidingLog => {
                let unexpired = 1.0 - elapsed as f64 / self.window as f64;
                f64::from(c.previous) * unexpired + f64::from(c.current)
            }
        }
    }

    /// µs from now until one more request fits.
    fn retry(&self, c: Counts, elapsed: u64) -> u64 {
        let w = self.window as f64;
        let to_end = self.window - elapsed;
        let room = f64::from(self.limit) - 1.0;
        if self.algorithm == QuotaAlgorithm::FixedWindow {
            return to_end;
        }
        let current = f64::from(c.current);
        if current <= room && c.previous > 0 {
            // Still in this window, once enough of the previous one has slid out.
            let needed = w * (1.0 - (room - current) / f64::from(c.previous));
            return (needed.ceil() as u64).saturating_sub(elapsed).min(to_end);
        }
        // In the next window, where this window's count becomes the weighted one.
        let needed = w * (1.0 - room / current.max(1.0));
        to_end + needed.max(0.0).ceil() as u64
    }

    /// Checks one request at `now` against the packed state `v`; with `add`, counts it if it
    /// fits. Returns the new state to store (only when a request was counted) and the answer.
    ///
    /// A state counted under other settings (a `limit` or `window` changed live) is read as
    /// these settings would: a window of another length has other ids, so its counts no longer
    /// count (1 time in 32,768 an id matches: the counts are then read as they are); counts
    /// above this limit read as this limit. So a raised limit admits what the old one did,
    /// and after any change a client waits at most what a full quota waits.
    pub fn hit(&self, v: u64, now: u64, add: bool) -> (Option<u64>, WindowCheck) {
        let id = now / self.window;
        let elapsed = now % self.window;
        let mut c = self.capped(roll(v, id));
        let estimate = self.estimate(c, elapsed);
        let allowed = estimate + 1.0 <= f64::from(self.limit) + 1e-9;
        let counted = allowed && add;
        if counted {
            c.current = c.current.saturating_add(1);
        }
        let used = estimate + f64::from(u8::from(counted));
        let check = WindowCheck {
            allowed,
            remaining: (f64::from(self.limit) - used).max(0.0).floor() as u32,
            reset: self.window - elapsed,
            retry: if allowed { 0 } else { self.retry(c, elapsed) },
        };
        (counted.then(|| pack(c)), check)
    }

    /// `c` with no count above the limit: a no-op under the settings that counted it (only
    /// a request that fits is counted), a cap after a limit was lowered.
    fn capped(&self, c: Counts) -> Counts {
        let limit = u16::try_from(self.limit).unwrap_or(u16::MAX);
        Counts {
            current: c.current.min(limit),
            previous: c.previous.min(limit),
            ..c
        }
    }

    /// Takes back one request counted in the window of `now`.
    pub fn refund(&self, v: u64, now: u64) -> Option<u64> {
        let mut c = unpack(v);
        (c.id == (now / self.window) as u16 && c.current > 0).then(|| {
            c.current -= 1;
            pack(c)
        })
    }

    /// Whether the state carries no information at `now` (nothing counted that still counts).
    pub fn idle(&self, v: u64, now: u64) -> bool {
        let c = roll(v, now / self.window);
        c.current == 0 && (c.previous == 0 || self.algorithm == QuotaAlgorithm::FixedWindow)
    }
}

#[cfg(test)]
#[path = "window_tests.rs"]
mod tests;
