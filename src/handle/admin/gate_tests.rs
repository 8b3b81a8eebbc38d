//! Tests of `handle/admin/gate.rs`.

use super::*;

#[test]
fn the_scheme_is_case_insensitive_and_the_token_exact() {
    let token = "0123456789abcdef";
    for header in [
        "Bearer 0123456789abcdef",
        "bearer 0123456789abcdef",
        "BEARER 0123456789abcdef",
        "bEaReR   0123456789abcdef ",
    ] {
        assert!(authorized(Some(header.as_bytes()), token), "{header}");
    }
    for header in [
        "Bearer 0123456789abcdeF",
        "Bearer 0123456789abcde",
        "Basic 0123456789abcdef",
        "Bearer0123456789abcdef",
        "",
    ] {
        assert!(!authorized(Some(header.as_bytes()), token), "{header}");
    }
    assert!(!authorized(None, token));
}
