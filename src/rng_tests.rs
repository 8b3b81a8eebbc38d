//! Tests of `rng.rs`.

use super::*;

#[test]
fn same_seed_same_sequence() {
    let mut a = SplitMix64::new(42);
    let mut b = SplitMix64::new(42);
    for _ in 0..100 {
        assert_eq!(a.next_u64(), b.next_u64());
    }
}

#[test]
fn unit_draws_are_in_range_and_roughly_uniform() {
    let mut r = SplitMix64::new(7);
    let n = 100_000;
    let mut below_half = 0;
    for _ in 0..n {
        let x = r.next_f64();
        assert!((0.0..1.0).contains(&x));
        if x < 0.5 {
            below_half += 1;
        }
    }
    let share = below_half as f64 / n as f64;
    assert!((share - 0.5).abs() < 0.01, "share below 0.5 was {share}");
}

#[test]
fn unit_bounds() {
    assert_eq!(unit(0), 0.0);
    assert!(unit(u64::MAX) < 1.0);
}
