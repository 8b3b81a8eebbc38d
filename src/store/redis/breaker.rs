//! The circuit breaker in front of Redis: after `failures` failed calls within `window` it
//! opens, and calls are not made (the limiters decide locally) for a backoff that doubles on
//! each failed probe, up to `max_backoff`. When the backoff ends one call is let through as a
//! probe: its success closes the breaker, its failure opens it again. Times are µs, injected.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What the breaker lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Every call goes to Redis.
    Closed,
    /// No call goes to Redis until the backoff ends.
    Open,
    /// One probe is out; everything else decides locally.
    HalfOpen,
}

impl BreakerState {
    /// For `/v1/state`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// For the `brownout_store_breaker_state` gauge.
    pub fn as_gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        }
    }
}

/// The breaker's tuning.
#[derive(Debug, Clone, Copy)]
pub struct BreakerParams {
    /// Failures within `window` that open it.
    pub failures: u32,
    /// µs.
    pub window: u64,
    /// First backoff, µs.
    pub backoff: u64,
    /// Longest backoff, µs.
    pub max_backoff: u64,
}

impl Default for BreakerParams {
    fn default() -> Self {
        Self {
            failures: 5,
            window: 1_000_000,
            backoff: 250_000,
            // Shared limits come back within about a second of Redis answering again.
            max_backoff: 1_000_000,
        }
    }
}

#[derive(Debug)]
struct Failures {
    /// When the current counting window started, and failures in it.
    since: u64,
    count: u32,
    /// The backoff the next opening uses.
    backoff: u64,
}

/// The breaker. `allow` is one relaxed load while closed.
#[derive(Debug)]
pub struct Breaker {
    params: BreakerParams,
    /// 0: closed. Otherwise the time (µs) the backoff ends; `u64::MAX` while a probe is out.
    open_until: AtomicU64,
    failures: Mutex<Failures>,
}

const PROBING: u64 = u64::MAX;

impl Breaker {
    /// A closed breaker.
    pub fn new(params: BreakerParams) -> Self {
        Self {
            params,
            open_until: AtomicU64::new(0),
            failures: Mutex::new(Failures {
                since: 0,
                count: 0,
                backoff: params.backoff,
            }),
        }
    }

    /// Whether a call may go to Redis at `now`: always while closed; once the backoff has
    /// ended, to exactly one caller (the probe).
    pub fn allow(&self, now: u64) -> bool {
        let until = self.open_until.load(Ordering::Relaxed);
        if until == 0 {
            return true;
        }
        if until == PROBING || now < until {
            return false;
        }
        self.open_until
            .compare_exchange(until, PROBING, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// The state at `now`.
    pub fn state(&self, now: u64) -> BreakerState {
        match self.open_until.load(Ordering::Relaxed) {
            0 => BreakerState::Closed,
            PROBING => BreakerState::HalfOpen,
            until if now >= until => BreakerState::HalfOpen,
            _ => BreakerState::Open,
        }
    }

    /// A call succeeded: a probe's success closes the breaker.
    pub fn success(&self) {
        if self.open_until.load(Ordering::Relaxed) != 0 {
            self.open_until.store(0, Ordering::Release);
            let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            f.count = 0;
            f.backoff = self.params.backoff;
        }
    }

    /// A call failed at `now`. Returns whether this opened the breaker.
    pub fn failure(&self, now: u64) -> bool {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let until = self.open_until.load(Ordering::Relaxed);
        if until == PROBING {
            // The probe failed: open again, for twice as long.
            f.backoff = (f.backoff.saturating_mul(2)).min(self.params.max_backoff);
            self.open_until
                .store(now.saturating_add(f.backoff).max(1), Ordering::Release);
            return true;
        }
        if until != 0 {
            return false;
        }
        if now.saturating_sub(f.since) > self.params.window {
            f.since = now;
            f.count = 0;
        }
        f.count += 1;
        if f.count < self.params.failures {
            return false;
        }
        f.count = 0;
        self.open_until
            .store(now.saturating_add(f.backoff).max(1), Ordering::Release);
        true
    }
}

#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;
