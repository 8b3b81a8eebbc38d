//! Releases that could not be sent (Redis down, a timeout, an error), kept to be sent again.
//! A release (HDEL of a client's permit, ZREM of a fleet slot) is idempotent: sending again
//! one that did run is harmless, so a failed one is kept rather than left to its TTL. FailedRelease
//! ones are deduplicated, bounded in number (the oldest go first) and dropped once older than
//! the permit TTL (the permit has expired by then). The next try waits a backoff that doubles
//! on each failure. Times are µs, injected.

use super::script::SlotSet;
use std::collections::{HashSet, VecDeque};
use std::time::Duration;

/// Most releases kept; past it the oldest are dropped (their permits expire by their TTL).
pub(super) const CAP: usize = 65_536;
/// The wait before the first try again.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between tries: a failed release is sent within about this long of Redis
/// answering again.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A release waiting to be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FailedRelease {
    /// The set it gives back to.
    pub(super) set: SlotSet,
    /// The member that holds the permit or slot.
    pub(super) member: u64,
    /// When it first failed (µs): the permit was taken before, so it has expired a TTL later.
    pub(super) since: u64,
}

/// The releases to send again, oldest first.
#[derive(Debug)]
pub(super) struct ReleaseRetries {
    kept: VecDeque<FailedRelease>,
    /// What `kept` holds, to keep each release once.
    members: HashSet<(SlotSet, u64)>,
    cap: usize,
    /// The permit TTL (µs).
    ttl_us: u64,
    /// The wait after the next failure.
    backoff: Duration,
}

impl ReleaseRetries {
    /// None kept; at most `cap`, each for up to `ttl_us` µs.
    pub(super) fn new(cap: usize, ttl_us: u64) -> Self {
        Self {
            kept: VecDeque::new(),
            members: HashSet::new(),
            cap: cap.max(1),
            ttl_us,
            backoff: FIRST_BACKOFF,
        }
    }

    /// Whether none is kept.
    pub(super) fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Keeps the release of `member` from `set` that failed at `since` (once: a release kept
    /// already is not kept twice). Returns how many were dropped to make room (0 or 1).
    pub(super) fn keep(&mut self, set: SlotSet, member: u64, since: u64) -> usize {
        if !self.members.insert((set, member)) {
            return 0;
        }
        self.kept.push_back(FailedRelease { set, member, since });
        self.trim()
    }

    /// Keeps the releases of a send at `now` that failed: those [`take`](Self::take) gave
    /// (they failed before `now`) first in line again, with the time they first failed; those
    /// tried for the first time (at `now`) last. Returns how many were dropped to make room.
    pub(super) fn restore(&mut self, failed: Vec<FailedRelease>, now: u64) -> usize {
        let (mut again, first): (Vec<FailedRelease>, Vec<FailedRelease>) =
            failed.into_iter().partition(|k| k.since < now);
        again.sort_by_key(|k| k.since);
        let mut dropped = self.put_back(again);
        for k in first {
            dropped += self.keep(k.set, k.member, k.since);
        }
        dropped
    }

    /// Puts `taken` (oldest first) back in front.
    fn put_back(&mut self, taken: Vec<FailedRelease>) -> usize {
        for kept in taken.into_iter().rev() {
            if self.members.insert((kept.set, kept.member)) {
                self.kept.push_front(kept);
            }
        }
        self.trim()
    }

    /// Drops the oldest past the cap; how many.
    fn trim(&mut self) -> usize {
        let mut dropped = 0;
        while self.kept.len() > self.cap {
            if let Some(old) = self.kept.pop_front() {
                self.members.remove(&(old.set, old.member));
                dropped += 1;
            }
        }
        dropped
    }

    /// Drops the releases that first failed a TTL or more before `now` (their permits have
    /// expired); how many.
    pub(super) fn expire(&mut self, now: u64) -> usize {
        let before = self.kept.len();
        let (ttl, members) = (self.ttl_us, &mut self.members);
        self.kept.retain(|k| {
            let live = now.saturating_sub(k.since) < ttl;
            if !live {
                members.remove(&(k.set, k.member));
            }
            live
        });
        before - self.kept.len()
    }

    /// Takes up to `n` of the oldest, to send.
    pub(super) fn take(&mut self, n: usize) -> Vec<FailedRelease> {
        let n = n.min(self.kept.len());
        let taken: Vec<FailedRelease> = self.kept.drain(..n).collect();
        for k in &taken {
            self.members.remove(&(k.set, k.member));
        }
        taken
    }

    /// A try failed: the wait before the next one (it doubles, up to [`MAX_BACKOFF`]).
    pub(super) fn failed(&mut self) -> Duration {
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        wait
    }

    /// A call succeeded: Redis answers, so the next failure waits the first backoff again.
    pub(super) fn succeeded(&mut self) {
        self.backoff = FIRST_BACKOFF;
    }
}

#[cfg(test)]
#[path = "pending_tests.rs"]
mod tests;
