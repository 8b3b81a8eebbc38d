use super::*;

#[test]
fn all_is_indexed_by_tier() {
    for (i, t) in Tier::ALL.iter().enumerate() {
        assert_eq!(t.index(), i);
    }
    assert!(Tier::Critical < Tier::Test);
}

#[test]
fn per_tier_lookup() {
    let p = PerTier::from_fn(|t| t.index() * 10);
    assert_eq!(p.get(Tier::Get), 20);
    assert_eq!(PerTier::splat(1.0).get(Tier::Test), 1.0);
}
