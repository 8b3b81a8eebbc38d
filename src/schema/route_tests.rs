//! Tests of `route.rs`.
use super::*;

#[test]
fn literal_and_param_segments() {
    let p = RoutePattern::parse("POST /v1/charges/{id}/capture").unwrap();
    assert!(p.matches("POST", "/v1/charges/ch_123/capture"));
    assert!(
        !p.matches("post", "/v1/charges/ch_123/capture/"),
        "actix: no route"
    );
    assert!(
        !p.matches("POST", "/v1/charges//capture"),
        "a param is never empty"
    );
    assert!(!p.matches("GET", "/v1/charges/ch_123/capture"));
    assert!(!p.matches("POST", "/v1/charges/ch_123"));
    assert!(!p.matches("POST", "/v1/charges/ch_123/capture/more"));
}

#[test]
fn a_literal_pattern_matches_exactly_what_the_segment_walk_would() {
    let cases = [
        "/",
        "/v1",
        "/v1/charges",
        "/v1/charges/",
        "/v1//charges",
        "/a/./b",
    ];
    let paths = [
        "/",
        "",
        "/v1",
        "v1",
        "/v1/",
        "/v1/charges",
        "/v1/charges/",
        "/v1//charges",
        "//v1/charges",
        "/a/./b",
        "/a/b",
        "/v1/chargesx",
    ];
    for pattern in cases {
        let p = RoutePattern::parse(&format!("GET {pattern}")).unwrap();
        assert!(p.literal.is_some());
        let walk = RoutePattern {
            literal: None,
            ..p.clone()
        };
        for path in paths {
            assert_eq!(
                p.matches("GET", path),
                walk.matches("GET", path),
                "{pattern} {path}"
            );
        }
    }
}

#[test]
fn any_method_and_root() {
    let p = RoutePattern::parse("* /").unwrap();
    assert!(p.matches("DELETE", "/"));
    assert!(!p.matches("GET", "/x"));
    let q = RoutePattern::parse("GET /v1/items").unwrap();
    assert!(q.matches("GET", "/v1/items"));
    assert!(!q.matches("GET", "/v1/itemsx"));
    assert!(!q.matches("GET", "/v1"));
}

#[test]
fn literal_beats_param_and_named_method_beats_any() {
    let lit = RoutePattern::parse("GET /v1/items/search").unwrap();
    let param = RoutePattern::parse("GET /v1/items/{id}").unwrap();
    let any = RoutePattern::parse("* /v1/items/search").unwrap();
    assert!(lit.specificity() > param.specificity());
    assert!(lit.specificity() > any.specificity());
}

#[test]
fn refuses_malformed_patterns() {
    assert!(RoutePattern::parse("POST").is_err());
    assert!(RoutePattern::parse("POST v1/charges").is_err());
    assert!(RoutePattern::parse("PO$T /v1").is_err());
    assert!(RoutePattern::parse("POST /a extra").is_err());
}
