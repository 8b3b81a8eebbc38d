//! The in-memory store's sliding logs ([`crate::math::log`]). A log's size varies, so it is
//! not in the lock-free fixed tables: keys are spread over mutex-guarded shards, a lock held
//! for one key's check. At most `keys` keys and [`LOG_EVENTS`] events (8 bytes each): past
//! either, the shard's idle logs are dropped, else the store answers `Full` and the quota
//! fails open, as every full table does.

use crate::math::window::{WindowCheck, WindowRule};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Shards: the locks keys are spread over.
const SHARDS: usize = 64;

/// Most events one log table keeps (32 MiB of timestamps).
pub const LOG_EVENTS: usize = 1 << 22;

#[derive(Debug, Default)]
struct Shard {
    logs: HashMap<u64, VecDeque<u64>, foldhash::fast::FixedState>,
    events: usize,
    /// When a full table last swept it (µs): at most once a second, so that requests
    /// against a full table do not each scan the shard.
    swept: u64,
}

impl Shard {
    /// Drops the logs that count nothing at `now`; how many.
    fn sweep(&mut self, rule: &WindowRule, now: u64) -> usize {
        let (mut dropped, before) = (0, self.logs.len());
        self.logs.retain(|_, log| {
            let idle = rule.log_idle(log, now);
            if idle {
                dropped += log.len();
            }
            !idle
        });
        self.events -= dropped;
        before - self.logs.len()
    }
}

/// Sliding logs of one quota, per key.
#[derive(Debug)]
pub(crate) struct LogTable {
    shards: Box<[Mutex<Shard>]>,
    /// Most keys.
    keys: usize,
    /// Keys with a log.
    live: AtomicUsize,
}

impl LogTable {
    /// A table for at most `keys` keys.
    pub(crate) fn new(keys: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            keys,
            live: AtomicUsize::new(0),
        }
    }

    fn shard(&self, key: u64) -> MutexGuard<'_, Shard> {
        // Key hashes are uniform: their top bits pick the shard. A panic under the lock
        // leaves a log as it was between two whole steps, so a poisoned lock is used as is.
        let at = (key >> 58) as usize % SHARDS;
        self.shards[at]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Checks one request of `key` at `now` against `rule` and, with `add`, records it if it
    /// fits; `None` when the table is full.
    pub(crate) fn hit(
        &self,
        key: u64,
        now: u64,
        rule: &WindowRule,
        add: bool,
    ) -> Option<WindowCheck> {
        let mut shard = self.shard(key);
        let shard = &mut *shard;
        let budget = LOG_EVENTS / SHARDS;
        let full = || self.live.load(Ordering::Relaxed) >= self.keys;
        let new_key = !shard.logs.contains_key(&key);
        let due = now >= shard.swept.saturating_add(1_000_000);
        if add && due && (shard.events >= budget || (new_key && full())) {
            shard.swept = now;
            let dropped = shard.sweep(rule, now);
            self.live.fetch_sub(dropped, Ordering::Relaxed);
        }
        let Some(log) = shard.logs.get_mut(&key) else {
            if !add {
                // A check of a key with no log records nothing, and keeps nothing.
                return Some(rule.log_hit(&mut VecDeque::new(), now, false));
            }
            if full() || shard.events >= budget {
                return None;
            }
            let mut log = VecDeque::new();
            let check = rule.log_hit(&mut log, now, true);
            shard.events += log.len();
            shard.logs.insert(key, log);
            self.live.fetch_add(1, Ordering::Relaxed);
            return Some(check);
        };
        let before = log.len();
        let room = shard.events < budget;
        let check = rule.log_hit(log, now, add && room);
        shard.events = shard.events - before + log.len();
        if log.is_empty() {
            shard.logs.remove(&key);
            self.live.fetch_sub(1, Ordering::Relaxed);
        }
        // A request that fits but cannot be recorded: the table is full.
        (room || !add || !check.allowed).then_some(check)
    }

    /// Takes back the event `key` recorded at `at`, if it is still kept.
    pub(crate) fn refund(&self, key: u64, at: u64, rule: &WindowRule) {
        let mut shard = self.shard(key);
        if let Some(log) = shard.logs.get_mut(&key) {
            let before = log.len();
            rule.log_refund(log, at);
            let taken = before - log.len();
            if log.is_empty() {
                shard.logs.remove(&key);
                self.live.fetch_sub(1, Ordering::Relaxed);
            }
            shard.events -= taken;
        }
    }

    /// Events kept for `key` (`None`: no log).
    pub(crate) fn peek(&self, key: u64) -> Option<u64> {
        self.shard(key).logs.get(&key).map(|log| log.len() as u64)
    }

    /// Drops every log that counts nothing at `now` under `rule`.
    pub(crate) fn sweep(&self, rule: &WindowRule, now: u64) {
        for shard in self.shards.iter() {
            let mut shard = shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let dropped = shard.sweep(rule, now);
            self.live.fetch_sub(dropped, Ordering::Relaxed);
        }
    }

    /// Keys with a log.
    pub(crate) fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
