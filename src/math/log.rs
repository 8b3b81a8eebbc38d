//! The sliding-window log, the exact quota: per key, the times (µs since the epoch) of its
//! events still in the window, oldest first. A request fits while fewer than `limit` are, so
//! no rolling window ever holds more than `limit`; the price is 8 bytes an event.

use super::window::{WindowCheck, WindowRule};
use std::collections::VecDeque;

/// The highest `limit` of a `sliding_log` quota (a key's log is at most 8,000 bytes).
pub const LOG_LIMIT_MAX: u32 = 1_000;

impl WindowRule {
    /// Whether an event at `at` has left the window at `now` (it counted for one window
    /// length: from `at` up to, not including, `at + window`).
    #[inline]
    fn gone(&self, at: u64, now: u64) -> bool {
        at.saturating_add(self.window) <= now
    }

    /// Checks one request at `now` against the `log` of a key, dropping the events that have
    /// left the window; with `add`, records it if it fits.
    ///
    /// After a live change a log is read under the new rule: a longer window sees the events
    /// still kept, a lowered limit refuses until fewer than it remain. A log keeps at most
    /// `limit` events (the oldest beyond it can no longer change a decision), and a clock
    /// that stepped back records its event in time order.
    pub fn log_hit(&self, log: &mut VecDeque<u64>, now: u64, add: bool) -> WindowCheck {
        while log.front().is_some_and(|&at| self.gone(at, now)) {
            log.pop_front();
        }
        let limit = self.limit as usize;
        let allowed = log.len() < limit;
        let mut retry = 0;
        if allowed && add {
            let at = log.partition_point(|&t| t <= now);
            log.insert(at, now);
        } else if !allowed {
            // Fewer than `limit` remain once the event `limit` places from the newest leaves.
            let freeing = log.get(log.len() - limit).map_or(now, |&at| at);
            retry = freeing.saturating_add(self.window).saturating_sub(now);
        }
        while log.len() > limit.max(1) {
            log.pop_front();
        }
        WindowCheck {
            allowed,
            remaining: (limit.saturating_sub(log.len())) as u32,
            reset: log
                .front()
                .map_or(0, |&at| at.saturating_add(self.window).saturating_sub(now)),
            retry,
        }
    }

    /// Takes back the event a request recorded at `at` (a later limiter refused it), if the
    /// log still holds it.
    pub fn log_refund(&self, log: &mut VecDeque<u64>, at: u64) {
        if let Some(i) = log.iter().rposition(|&t| t == at) {
            log.remove(i);
        }
    }

    /// Whether the log counts nothing at `now` (every event has left the window).
    pub fn log_idle(&self, log: &VecDeque<u64>, now: u64) -> bool {
        log.back().is_none_or(|&at| self.gone(at, now))
    }
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
