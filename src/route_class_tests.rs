//! Tests of `route_class.rs`.

use super::*;

#[test]
fn a_route_keeps_its_id_and_each_tier_its_class() {
    let r = RouteClasses::default();
    let a = r.of_pattern("GET", "/v1/items/{id}", Tier::Get);
    let b = r.of_pattern("POST", "/v1/items/{id}", Tier::Post);
    assert_ne!(a.route(), b.route(), "the method is part of the route");
    assert_eq!(r.of_pattern("GET", "/v1/items/{id}", Tier::Get), a);
    let test = r.of_pattern("GET", "/v1/items/{id}", Tier::Test);
    assert_eq!((test.route(), test.tier()), (a.route(), Tier::Test));
    assert_eq!(a.in_tier(Tier::Test), test);
    assert_eq!(r.name(a.route()), Some("GET /v1/items/{id}"));
    assert!(RouteClass::other(Tier::Test).index() < CLASSES);
    assert_eq!(tier_index(b.index()), Tier::Post.index());
}

#[test]
fn methods_are_case_sensitive_and_invented_ones_are_one() {
    let r = RouteClasses::default();
    let post = r.of_pattern("POST", "/v1/charges", Tier::Critical);
    let lower = r.of_pattern("post", "/v1/charges", Tier::Post);
    let invented = r.of_pattern("FROB", "/v1/charges", Tier::Post);
    assert_ne!(post.route(), lower.route());
    assert_eq!(lower.route(), invented.route());
    assert_eq!(r.name(lower.route()), Some("* /v1/charges"));
}

#[test]
fn routes_past_the_bound_are_other() {
    let r = RouteClasses::default();
    for i in 0..ROUTES {
        let c = r.of_pattern("GET", &format!("/r{i}"), Tier::Get);
        assert_eq!(c.route(), i);
    }
    for i in ROUTES..ROUTES * 3 {
        let c = r.of_pattern("GET", &format!("/r{i}"), Tier::Get);
        assert_eq!(c, RouteClass::other(Tier::Get), "{i}");
    }
    // The first ones keep their ids.
    assert_eq!(r.of_pattern("GET", "/r3", Tier::Get).route(), 3);
}

/// Per-class values with `by_tier[t]` on one route in each tier (route 0), for tests.
pub(crate) fn on_one_route(by_tier: [u64; 4]) -> [u64; CLASSES] {
    let mut out = [0; CLASSES];
    out[..4].copy_from_slice(&by_tier);
    out
}
