//! Tests of `store/log.rs`: the memory store's bounds on sliding logs.

use super::*;
use crate::schema::QuotaAlgorithm;

const RULE: WindowRule = WindowRule {
    algorithm: QuotaAlgorithm::SlidingLog,
    limit: 2,
    window: 10,
};

#[test]
fn a_full_table_refuses_new_keys_until_a_log_goes_idle() {
    // A table of one key; times from 5 s (µs).
    let t = LogTable::new(1);
    let (a, b, c) = ((1 << 58) | 1, (1 << 58) | 2, (1 << 58) | 3);
    let at = |us: u64| 5_000_000 + us;
    assert!(t.hit(a, at(0), &RULE, true).is_some());
    assert!(
        t.hit(b, at(0), &RULE, true).is_none(),
        "the table holds one key"
    );
    let check = t
        .hit(b, at(5), &RULE, false)
        .expect("a check keeps nothing: it always answers");
    assert!(check.allowed);
    // At 10 µs a's one event has left its window, but a full table is swept at most once a
    // second (the refusal at 0 swept it): a new key is refused until then.
    assert!(t.hit(b, at(10), &RULE, true).is_none());
    let check = t
        .hit(b, at(1_000_000), &RULE, true)
        .expect("a's idle log dropped");
    assert_eq!((check.allowed, check.remaining), (true, 1));
    assert_eq!((t.peek(a), t.peek(b)), (None, Some(1)));
    assert!(
        t.hit(c, at(1_000_010), &RULE, true).is_none(),
        "b's log is live"
    );
    t.refund(b, at(1_000_000), &RULE);
    assert_eq!(
        (t.peek(b), t.live()),
        (None, 0),
        "an empty log keeps no key"
    );
}

#[test]
fn a_sweep_drops_idle_logs_and_keeps_live_ones() {
    let t = LogTable::new(1 << 16);
    for key in 0..100_u64 {
        let key = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        t.hit(key, 100 + key % 20, &RULE, true);
    }
    assert_eq!(t.live(), 100);
    t.sweep(&RULE, 115);
    // Events at 100..=105 have left by 115 (an event counts for 10 µs); 106..=119 stay.
    let live = (0..100_u64)
        .map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .filter(|k| 100 + k % 20 > 105)
        .count();
    assert_eq!(t.live(), live);
}
