//! Releases that could not be sent (Redis down, a timeout, an error), kept to be sent again.
//! A release (HDEL of a client's permit, ZREM of a fleet slot) is idempotent: sending again
//! one that did run is harmless, so a failed one is kept rather than left to its TTL. Kept
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
pub(super) struct Kept {
    /// The set it gives back to.
    pub(super) set: SlotSet,
    /// The member that holds the permit or slot.
    pub(super) member: u64,
    /// When it first failed (µs): the permit was taken before, so it has expired a TTL later.
    pub(super) since: u64,
}

/// The releases to send again, oldest first.
#[derive(Debug)]
pub(super) struct Pending {
    kept: VecDeque<Kept>,
    /// What `kept` holds, to keep each release once.
    members: HashSet<(SlotSet, u64)>,
    cap: usize,
    /// The permit TTL (µs).
    ttl_us: u64,
    /// The wait after the next failure.
    backoff: Duration,
}

impl Pending {
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
        self.kept.push_back(Kept { set, member, since });
        self.trim()
    }

    /// Keeps the releases of a send at `now` that failed: those [`take`](Self::take) gave
    /// (they failed before `now`) first in line again, with the time they first failed; those
    /// tried for the first time (at `now`) last. Returns how many were dropped to make room.
    pub(super) fn restore(&mut self, failed: Vec<Kept>, now: u64) -> usize {
        let (mut again, first): (Vec<Kept>, Vec<Kept>) =
            failed.into_iter().partition(|k| k.since < now);
        again.sort_by_key(|k| k.since);
        let mut dropped = self.put_back(again);
        for k in first {
            dropped += self.keep(k.set, k.member, k.since);
        }
        dropped
    }

    /// Puts `taken` (oldest first) back in front.
    fn put_back(&mut self, taken: Vec<Kept>) -> usize {
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
    pub(super) fn take(&mut self, n: usize) -> Vec<Kept> {
        let n = n.min(self.kept.len());
        let taken: Vec<Kept> = self.kept.drain(..n).collect();
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
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn members(kept: &[Kept]) -> Vec<u64> {
        kept.iter().map(|k| k.member).collect()
    }

    #[test]
    fn a_release_is_kept_once_and_taken_oldest_first() {
        let mut p = Pending::new(10, 60 * S);
        assert_eq!(p.keep(SlotSet::Client(7), 1, 0), 0);
        assert_eq!(
            p.keep(SlotSet::Fleet, 1, 0),
            0,
            "another set: another release"
        );
        assert_eq!(p.keep(SlotSet::Client(7), 1, 5), 0);
        assert_eq!(p.kept.len(), 2, "the same release kept once");
        p.keep(SlotSet::Client(7), 2, 10);
        let taken = p.take(2);
        assert_eq!(
            taken,
            vec![
                Kept {
                    set: SlotSet::Client(7),
                    member: 1,
                    since: 0
                },
                Kept {
                    set: SlotSet::Fleet,
                    member: 1,
                    since: 0
                },
            ]
        );
        assert_eq!(members(&p.take(10)), vec![2]);
        assert!(p.is_empty());
        // Taken, it may be kept again (its try failed).
        assert_eq!(p.keep(SlotSet::Client(7), 1, 20), 0);
        assert_eq!(p.kept.len(), 1);
    }

    #[test]
    fn releases_that_fail_again_go_first_with_their_first_failure_time() {
        let mut p = Pending::new(10, 60 * S);
        for m in 1..=4 {
            p.keep(SlotSet::Fleet, m, m);
        }
        let mut taken = p.take(3);
        taken.reverse(); // as a send may give them back
        p.keep(SlotSet::Fleet, 5, 90);
        // A send at 100 with two of them and two new releases (one of them kept already).
        let new = |member| Kept {
            set: SlotSet::Fleet,
            member,
            since: 100,
        };
        let failed = vec![taken[0], new(6), taken[2], new(5)];
        assert_eq!(p.restore(failed, 100), 0);
        let all = p.take(10);
        assert_eq!(members(&all), vec![1, 3, 4, 5, 6]);
        assert_eq!(all[0].since, 1, "the time it first failed");
        assert_eq!(all[3].since, 90, "kept once, with its first time");
    }

    #[test]
    fn past_the_cap_the_oldest_are_dropped() {
        let mut p = Pending::new(3, 60 * S);
        for m in 0..3 {
            assert_eq!(p.keep(SlotSet::Client(m), m, m), 0);
        }
        assert_eq!(p.keep(SlotSet::Client(3), 3, 3), 1);
        assert_eq!(p.kept.len(), 3);
        let taken = p.take(1);
        assert_eq!(
            members(&taken),
            vec![1],
            "member 0 (the oldest) was dropped"
        );
        p.keep(SlotSet::Client(4), 4, 4);
        assert_eq!(p.restore(taken, 5), 1, "full again: the oldest goes");
        assert_eq!(members(&p.take(10)), vec![2, 3, 4]);
        // A dropped release may be kept again.
        assert_eq!(p.keep(SlotSet::Client(0), 0, 9), 0);
    }

    #[test]
    fn releases_older_than_the_permit_ttl_are_dropped() {
        let mut p = Pending::new(10, 60 * S);
        p.keep(SlotSet::Fleet, 1, 0);
        p.keep(SlotSet::Fleet, 2, 30 * S);
        assert_eq!(p.expire(60 * S - 1), 0, "not yet a TTL old");
        assert_eq!(p.expire(60 * S), 1);
        assert_eq!(members(&p.take(10)), vec![2]);
        p.keep(SlotSet::Fleet, 1, 61 * S);
        assert_eq!(p.kept.len(), 1, "an expired release may be kept again");
        assert_eq!(p.expire(200 * S), 1);
        assert!(p.is_empty());
    }

    #[test]
    fn the_wait_between_tries_doubles_up_to_a_second_and_resets_on_success() {
        let mut p = Pending::new(10, 60 * S);
        let waits: Vec<u128> = (0..7).map(|_| p.failed().as_millis()).collect();
        assert_eq!(waits, vec![50, 100, 200, 400, 800, 1_000, 1_000]);
        p.succeeded();
        assert_eq!(p.failed(), FIRST_BACKOFF);
    }
}
