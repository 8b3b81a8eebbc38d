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
    // A table of one key.
    let t = LogTable::new(1);
    let (a, b) = ((1 << 58) | 1, (1 << 58) | 2);
    assert!(t.hit(a, 100, &RULE, true).is_some());
    assert!(
        t.hit(b, 100, &RULE, true).is_none(),
        "the table holds one key"
    );
    let check = t
        .hit(b, 105, &RULE, false)
        .expect("a check keeps nothing: it always answers");
    assert!(check.allowed);
    // At 110 a's one event has left its window: its log is dropped to make room.
    let check = t.hit(b, 110, &RULE, true).expect("room made");
    assert_eq!((check.allowed, check.remaining), (true, 1));
    assert_eq!((t.peek(a), t.peek(b)), (None, Some(1)));
    t.refund(b, 110, &RULE);
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
