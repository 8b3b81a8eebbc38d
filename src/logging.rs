//! Rate-limited logging, so a failing limiter cannot flood the logs from the request path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::nanos;

/// Lets one message through per `every`, counting the ones it held back.
#[derive(Debug)]
pub struct LogGate {
    every: u64,
    next: AtomicU64,
    suppressed: AtomicU64,
}

impl LogGate {
    /// A gate that opens at most once per `every`.
    pub const fn new(every: Duration) -> Self {
        Self {
            every: every.as_nanos() as u64,
            next: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(held back since the last one)` if a message may be logged at `now`.
    pub fn open(&self, now: Duration) -> Option<u64> {
        let now = nanos(now);
        let next = self.next.load(Ordering::Relaxed);
        if now >= next
            && self
                .next
                .compare_exchange(next, now + self.every, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// `text` on one line, its whitespace runs collapsed (a parser's message may span several).
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How much a [`notice`] matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Info,
    Warn,
    Error,
}

/// Tells the operator about something they asked for (a reload) or should fix (a short
/// token), once: through `tracing` when the app installed a subscriber, else on stderr, so an
/// app that set up no logging still shows it.
pub(crate) fn notice(level: Level, message: &str) {
    if tracing::dispatcher::has_been_set() {
        match level {
            Level::Info => tracing::info!("{message}"),
            Level::Warn => tracing::warn!("{message}"),
            Level::Error => tracing::error!("{message}"),
        }
    } else if level == Level::Warn {
        eprintln!("brownout: warning: {message}");
    } else {
        eprintln!("brownout: {message}");
    }
}

#[cfg(test)]
#[path = "logging_tests.rs"]
mod tests;
