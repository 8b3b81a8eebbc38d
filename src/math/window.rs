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
            QuotaAlgorithm::SlidingWindow => {
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
    pub fn hit(&self, v: u64, now: u64, add: bool) -> (Option<u64>, WindowCheck) {
        let id = now / self.window;
        let elapsed = now % self.window;
        let mut c = roll(v, id);
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000;

    fn rule(algorithm: QuotaAlgorithm, limit: u32, window_secs: u64) -> WindowRule {
        WindowRule {
            algorithm,
            limit,
            window: window_secs * SEC,
        }
    }

    /// Sends requests at the given times; returns which were admitted.
    fn run(r: &WindowRule, times: &[u64]) -> Vec<bool> {
        let mut v = 0;
        times
            .iter()
            .map(|&t| {
                let (next, check) = r.hit(v, t, true);
                if let Some(n) = next {
                    v = n;
                }
                check.allowed
            })
            .collect()
    }

    #[test]
    fn fixed_window_allows_a_boundary_burst_sliding_does_not() {
        // 3 per minute: three at 59.9 s, three more at 60.1 s.
        let times = [
            59_900_000, 59_950_000, 59_990_000, 60_100_000, 60_150_000, 60_200_000,
        ];
        let fixed = run(&rule(QuotaAlgorithm::FixedWindow, 3, 60), &times);
        assert_eq!(fixed, [true; 6], "fixed windows let 6 through in 0.3 s");
        let sliding = run(&rule(QuotaAlgorithm::SlidingWindow, 3, 60), &times);
        assert_eq!(sliding, [true, true, true, false, false, false]);
    }

    #[test]
    fn sliding_window_weights_the_previous_window() {
        let r = rule(QuotaAlgorithm::SlidingWindow, 10, 60);
        let mut v = 0;
        for i in 0..8 {
            v = r.hit(v, i * SEC, true).0.unwrap();
        }
        // 15 s into the next window, 75% of the previous 8 still count: 6, so 4 more fit.
        let at = 75 * SEC;
        let mut admitted = 0;
        loop {
            let (next, check) = r.hit(v, at, true);
            if !check.allowed {
                break;
            }
            admitted += 1;
            v = next.unwrap();
        }
        assert_eq!(admitted, 4);
    }

    #[test]
    fn retry_after_points_at_the_first_moment_that_fits() {
        for algorithm in [QuotaAlgorithm::FixedWindow, QuotaAlgorithm::SlidingWindow] {
            let r = rule(algorithm, 3, 60);
            let mut v = 0;
            for t in [10, 20, 30] {
                v = r.hit(v, t * SEC, true).0.unwrap();
            }
            let (_, denied) = r.hit(v, 40 * SEC, true);
            assert!(!denied.allowed);
            let at = 40 * SEC + denied.retry;
            assert!(
                r.hit(v, at, false).1.allowed,
                "{algorithm:?}: fits at +{}",
                denied.retry
            );
            assert!(
                !r.hit(v, at - 2, false).1.allowed,
                "{algorithm:?}: not earlier"
            );
        }
    }

    #[test]
    fn refund_and_idle() {
        let r = rule(QuotaAlgorithm::SlidingWindow, 3, 60);
        let v = r.hit(0, 5 * SEC, true).0.unwrap();
        assert!(!r.idle(v, 6 * SEC));
        assert!(!r.idle(v, 65 * SEC), "still weighted in the next window");
        assert!(r.idle(v, 125 * SEC));
        let back = r.refund(v, 6 * SEC).unwrap();
        assert!(r.idle(back, 6 * SEC));
        assert_eq!(r.refund(v, 70 * SEC), None, "another window");
        let f = rule(QuotaAlgorithm::FixedWindow, 3, 60);
        assert!(f.idle(v, 65 * SEC));
    }

    #[test]
    fn check_without_add_counts_nothing() {
        let r = rule(QuotaAlgorithm::FixedWindow, 1, 60);
        let (next, check) = r.hit(0, SEC, false);
        assert!(check.allowed && next.is_none());
    }

    proptest! {
        #[test]
        fn no_aligned_window_admits_more_than_the_limit(
            sliding in any::<bool>(),
            limit in 1u32..20,
            gaps in proptest::collection::vec(0u64..20 * SEC, 1..300),
        ) {
            let algorithm = if sliding { QuotaAlgorithm::SlidingWindow } else { QuotaAlgorithm::FixedWindow };
            let r = rule(algorithm, limit, 60);
            let mut now = 0;
            let times: Vec<u64> = gaps.iter().map(|g| { now += g; now }).collect();
            let admitted = run(&r, &times);
            let mut per_window = std::collections::BTreeMap::new();
            for (t, ok) in times.iter().zip(&admitted) {
                if *ok { *per_window.entry(t / r.window).or_insert(0u32) += 1; }
            }
            for count in per_window.values() { prop_assert!(*count <= limit); }
            if sliding {
                // The weighted estimate never exceeds the limit at any admission.
                let mut v = 0;
                for &t in &times {
                    let (next, check) = r.hit(v, t, true);
                    if let Some(n) = next { v = n; }
                    if check.allowed {
                        let c = roll(v, t / r.window);
                        prop_assert!(r.estimate(c, t % r.window) <= f64::from(limit) + 1e-9);
                    }
                }
            }
        }
    }
}
