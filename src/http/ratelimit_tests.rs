//! The RateLimit fields, written from what the limiter saw.

use super::*;
use crate::config::Config;
use crate::limiter::request_rate::CheckTime;
use crate::limiter::{Check, Request};
use crate::store::MemoryStore;
use crate::tier::Tier;

/// A header value as the tests read it (the front doors' types are behind features).
#[derive(Clone, Debug, PartialEq)]
struct Text(Bytes);

impl FieldValue for Text {
    fn from_shared(bytes: Bytes) -> Option<Self> {
        let valid = bytes
            .iter()
            .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b));
        valid.then_some(Self(bytes))
    }

    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Text {
    fn to_str(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.0)
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

fn rules(yaml: &str) -> RateRules {
    RateRules::compile(&Config::from_yaml_str(yaml).unwrap().limiters.request_rate).unwrap()
}

#[test]
fn policies_of_each_plan() {
    let r = rules("limiters:\n  request_rate:\n    rate: 10\n    burst: 20\n    plans:\n      free:\n        rate: 1\n        burst: 5\n");
    let p = policies::<Text>(&r);
    assert_eq!(p[0][0], "\"request_rate\";q=20;w=2");
    assert_eq!(p[r.plan(Some("free"))][0], "\"request_rate\";q=5;w=5");
}

#[test]
fn a_quota_rejection_reports_the_refunded_bucket_and_the_quota() {
    let r = rules("limiters:\n  request_rate:\n    rate: 1\n    burst: 10\n    quotas:\n      - {name: signups, algorithm: fixed_window, limit: 2, window: 1d, routes: [\"POST /v1/accounts\"], key: ip}\n");
    let store = crate::store::Keyed::local_only(std::sync::Arc::new(MemoryStore::sized(64, 1, 64)));
    let signup = Request {
        tier: Tier::Post,
        key: 42,
        ip: 7,
        method: "POST",
        path: "/v1/accounts",
        plan: None,
        preflight: false,
        paid: false,
    };
    let at = CheckTime::default();
    for _ in 0..2 {
        let c = r.check(&store, &signup, at, false).unwrap();
        assert!(c.rejection().is_none());
    }
    let Check::Rejected(rejection, status) = r.check(&store, &signup, at, false).unwrap() else {
        panic!("the third sign-up is over the quota")
    };
    assert_eq!(
        allowed::<Text>(&r, &status).unwrap(),
        "\"request_rate\";r=8;t=2, \"signups\";r=0;t=86400"
    );
    assert_eq!(
        rejected::<Text>(&r, &status, &rejection, 86_400).unwrap(),
        "\"signups\";r=0;t=86400"
    );
}

#[test]
fn the_last_field_is_reused_only_while_it_says_the_same() {
    let r = rules("limiters:\n  request_rate:\n    rate: 1\n    burst: 10\n    quotas:\n      - {name: signups, algorithm: fixed_window, limit: 2, window: 1d, routes: [\"POST /v1/accounts\"], key: ip}\n");
    let store = crate::store::Keyed::local_only(std::sync::Arc::new(MemoryStore::sized(64, 1, 64)));
    let mut last = LastField::<Text>::default();
    let status = |key: u64, path: &'static str, method: &'static str| {
        let req = Request {
            tier: Tier::Post,
            key,
            ip: key,
            method,
            path,
            plan: None,
            preflight: false,
            paid: false,
        };
        match r.check(&store, &req, CheckTime::default(), false).unwrap() {
            Check::Allowed(admitted) => admitted.status,
            Check::Rejected(..) => panic!("room for it"),
        }
    };
    // Two clients with the same credits left: the same field, the second a clone.
    let (a, b) = (
        status(1, "/v1/items", "POST"),
        status(2, "/v1/items", "POST"),
    );
    let first = last.allowed(1, &r, &a).unwrap();
    assert_eq!(first, allowed::<Text>(&r, &a).unwrap());
    let second = last.allowed(1, &r, &b).unwrap();
    assert_eq!(second, first);
    // Another reading, a route with a quota, new settings: written afresh, as allowed() writes.
    let again = status(1, "/v1/items", "POST");
    assert_ne!(last.allowed(1, &r, &again).unwrap(), first);
    assert_eq!(last.allowed(1, &r, &again), allowed::<Text>(&r, &again));
    let quota = status(3, "/v1/accounts", "POST");
    assert_eq!(last.allowed(1, &r, &quota), allowed::<Text>(&r, &quota));
    assert!(allowed::<Text>(&r, &quota)
        .unwrap()
        .to_str()
        .unwrap()
        .contains("signups"));
    let renamed = rules("limiters:\n  request_rate:\n    rate: 1\n    burst: 10\n    quotas:\n      - {name: accounts, algorithm: fixed_window, limit: 2, window: 1d, routes: [\"POST /v1/accounts\"], key: ip}\n");
    let field = last.allowed(2, &renamed, &quota).unwrap();
    assert!(
        field.to_str().unwrap().contains("\"accounts\""),
        "{field:?}"
    );
}

#[test]
fn field_numbers_and_separators() {
    let mut f = Field::new();
    f.item("a", 0, 9);
    f.item("b", 10, u32::MAX);
    assert_eq!(
        f.value::<Text>().unwrap(),
        "\"a\";r=0;t=9, \"b\";r=10;t=4294967295"
    );
    assert!(Field::new().value::<Text>().is_none());
    // Past the stack buffer, the field goes on in a heap one.
    let mut long = Field::new();
    let name = "q".repeat(100);
    long.item(&name, 1, 2);
    long.item(&name, 3, 4);
    let want = format!("\"{name}\";r=1;t=2, \"{name}\";r=3;t=4");
    assert_eq!(long.value::<Text>().unwrap(), want.as_str());
}

#[test]
fn a_field_reads_as_its_items_in_place_or_spilled() {
    let numbers = [
        0,
        9,
        10,
        99,
        100,
        65_535,
        999_999_999,
        1_000_000_000,
        u32::MAX,
    ];
    for long in [false, true] {
        let mut field = Field::new();
        let mut want = Vec::new();
        for (i, &n) in numbers.iter().enumerate() {
            // Long names spill to the heap after the first items.
            let name = if long {
                format!("quota_{i}_{}", "x".repeat(40))
            } else {
                format!("q{i}")
            };
            let reset = numbers[numbers.len() - 1 - i];
            field.item(&name, n, reset);
            want.push(format!("\"{name}\";r={n};t={reset}"));
        }
        let value = field.value::<Text>().unwrap();
        assert_eq!(
            value.to_str().unwrap(),
            want.join(", "),
            "long names: {long}"
        );
    }
    assert_eq!(Field::new().value::<Text>(), None);
}
