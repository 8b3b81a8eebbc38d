use crate::config::refused;

#[test]
fn adaptive_concurrency_settings_name_their_key() {
    let e = refused("limiters:\n  adaptive_concurrency:\n    tier_hold: 2m\n");
    assert!(
        e.starts_with("limiters.adaptive_concurrency.tier_hold must be at most 60s"),
        "{e}"
    );
    let e = refused("limiters:\n  adaptive_concurrency:\n    test_share: 0.95\n");
    assert!(
        e.starts_with("limiters.adaptive_concurrency.test_share must not exceed get_share"),
        "{e}"
    );
}
