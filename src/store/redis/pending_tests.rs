//! The kept releases' bookkeeping, without Redis.

use super::*;
use crate::store::Table;

const CLIENT: SlotSet = SlotSet {
    table: Table::new(1),
    key: 7,
};
const FLEET: SlotSet = SlotSet {
    table: Table::new(2),
    key: 0,
};

const S: u64 = 1_000_000;

fn members(kept: &[FailedRelease]) -> Vec<u64> {
    kept.iter().map(|k| k.member).collect()
}

#[test]
fn a_release_is_kept_once_and_taken_oldest_first() {
    let mut p = ReleaseRetries::new(10, 60 * S);
    assert_eq!(p.keep(CLIENT, 1, 0), 0);
    assert_eq!(p.keep(FLEET, 1, 0), 0, "another set: another release");
    assert_eq!(p.keep(CLIENT, 1, 5), 0);
    assert_eq!(p.kept.len(), 2, "the same release kept once");
    p.keep(CLIENT, 2, 10);
    let taken = p.take(2);
    assert_eq!(
        taken,
        vec![
            FailedRelease {
                set: CLIENT,
                member: 1,
                since: 0
            },
            FailedRelease {
                set: FLEET,
                member: 1,
                since: 0
            },
        ]
    );
    assert_eq!(members(&p.take(10)), vec![2]);
    assert!(p.is_empty());
    // Taken, it may be kept again (its try failed).
    assert_eq!(p.keep(CLIENT, 1, 20), 0);
    assert_eq!(p.kept.len(), 1);
}

#[test]
fn releases_that_fail_again_go_first_with_their_first_failure_time() {
    let mut p = ReleaseRetries::new(10, 60 * S);
    for m in 1..=4 {
        p.keep(FLEET, m, m);
    }
    let mut taken = p.take(3);
    taken.reverse(); // as a send may give them back
    p.keep(FLEET, 5, 90);
    // A send at 100 with two of them and two new releases (one of them kept already).
    let new = |member| FailedRelease {
        set: FLEET,
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
    let mut p = ReleaseRetries::new(3, 60 * S);
    for m in 0..3 {
        assert_eq!(p.keep(client(m), m, m), 0);
    }
    assert_eq!(p.keep(client(3), 3, 3), 1);
    assert_eq!(p.kept.len(), 3);
    let taken = p.take(1);
    assert_eq!(
        members(&taken),
        vec![1],
        "member 0 (the oldest) was dropped"
    );
    p.keep(client(4), 4, 4);
    assert_eq!(p.restore(taken, 5), 1, "full again: the oldest goes");
    assert_eq!(members(&p.take(10)), vec![2, 3, 4]);
    // A dropped release may be kept again.
    assert_eq!(p.keep(client(0), 0, 9), 0);
}

#[test]
fn releases_older_than_the_permit_ttl_are_dropped() {
    let mut p = ReleaseRetries::new(10, 60 * S);
    p.keep(FLEET, 1, 0);
    p.keep(FLEET, 2, 30 * S);
    assert_eq!(p.expire(60 * S - 1), 0, "not yet a TTL old");
    assert_eq!(p.expire(60 * S), 1);
    assert_eq!(members(&p.take(10)), vec![2]);
    p.keep(FLEET, 1, 61 * S);
    assert_eq!(p.kept.len(), 1, "an expired release may be kept again");
    assert_eq!(p.expire(200 * S), 1);
    assert!(p.is_empty());
}

#[test]
fn the_wait_between_tries_doubles_up_to_a_second_and_resets_on_success() {
    let mut p = ReleaseRetries::new(10, 60 * S);
    let waits: Vec<u128> = (0..7).map(|_| p.failed().as_millis()).collect();
    assert_eq!(waits, vec![50, 100, 200, 400, 800, 1_000, 1_000]);
    p.succeeded();
    assert_eq!(p.failed(), FIRST_BACKOFF);
}

/// A slot of client `key`.
fn client(key: u64) -> SlotSet {
    SlotSet {
        table: Table::new(1),
        key,
    }
}
