//! Tests of `store/hybrid.rs`.

use super::*;
use crate::store::{TableKind, TableSpec};

const BUCKETS: Table = Table::new(0);

#[test]
fn rounds_carry_what_was_charged_and_settle_on_the_fleets_bucket() {
    let store = HybridStore::new(
        MemoryStore::with_tables(&[TableSpec::new(BUCKETS, TableKind::Gcra, 64)]),
        BUCKETS,
    );
    store
        .gcra(BUCKETS, 9, 0, BucketCharge::new(1_000, 10_000))
        .unwrap();
    assert!(
        store.drain().is_empty(),
        "nothing is recorded before the rounds start"
    );
    store.started.store(true, Ordering::Relaxed);
    // 10 credits of 1 ms each within a tolerance of 10 ms: the 11th is refused.
    for _ in 0..10 {
        let c = store
            .gcra(BUCKETS, 7, 0, BucketCharge::new(1_000, 10_000))
            .unwrap();
        assert!(matches!(c, Charge::Allowed { .. }));
    }
    assert!(matches!(
        store
            .gcra(BUCKETS, 7, 0, BucketCharge::new(1_000, 10_000))
            .unwrap(),
        Charge::Denied { .. }
    ));
    store.gcra_refund(BUCKETS, 7, 1_000).unwrap();
    assert_eq!(
        store
            .drain()
            .iter()
            .map(|(k, c)| (*k, c.credit))
            .collect::<Vec<_>>(),
        vec![(7, 9_000)]
    );
    assert!(store.drain().is_empty(), "a round takes it all");
    // The fleet's bucket is 5 ms further on than this one: another instance charged it.
    store.settle(0, &[(7, 14_000, 0)]);
    assert!(matches!(
        store
            .gcra(BUCKETS, 7, 5_000, BucketCharge::new(1_000, 10_000))
            .unwrap(),
        Charge::Allowed { tat: 15_000 }
    ));
    // Charged while a round is out: kept on top of the fleet's answer.
    store.settle(5_000, &[(7, 12_000, 0)]);
    assert!(matches!(
        store
            .gcra(BUCKETS, 7, 5_000, BucketCharge::new(1_000, 10_000))
            .unwrap(),
        Charge::Allowed { tat: 14_000 }
    ));
    // A fleet bucket that is full (0) leaves only this round's charges.
    store.drain();
    store.settle(5_000, &[(7, 0, 0)]);
    assert!(matches!(
        store
            .gcra(BUCKETS, 7, 5_000, BucketCharge::new(1_000, 10_000))
            .unwrap(),
        Charge::Allowed { tat: 6_000 }
    ));
}
