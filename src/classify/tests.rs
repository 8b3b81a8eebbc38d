//! The classifier: tiers, keys, forwarded addresses.
use super::*;

/// The demo's rules: `POST /v1/charges` critical, `sk_test_` keys test-mode.
fn classifier(trust_xff: bool) -> Classifier {
    let cfg = ClassifierConfig {
        trust_forwarded_for: trust_xff,
        critical: vec!["POST /v1/charges".into()],
        test_key_prefix: Some("sk_test_".into()),
        ..ClassifierConfig::default()
    };
    Classifier::new(&cfg, 1).unwrap()
}

fn facts<'a>(method: &'a str, path: &'a str) -> RequestFacts<'a> {
    RequestFacts {
        method,
        path,
        peer: Some("10.0.0.1".parse().unwrap()),
        ..RequestFacts::default()
    }
}

#[test]
fn the_library_names_no_critical_route_and_no_test_key() {
    let c = Classifier::new(&ClassifierConfig::default(), 1).unwrap();
    let mut f = facts("POST", "/v1/charges");
    f.authorization = Some(b"Bearer sk_test_abc");
    assert_eq!(c.classify(&f).tier, Tier::Post);
    f.test_mode = Some(b"true");
    assert_eq!(c.classify(&f).tier, Tier::Test);
}

#[test]
fn tier_rules() {
    let c = classifier(false);
    let tier = |m, p| c.classify(&facts(m, p)).tier;
    assert_eq!(tier("POST", "/v1/charges"), Tier::Critical);
    assert_eq!(tier("POST", "/v1/items"), Tier::Post);
    for m in ["PUT", "PATCH", "DELETE"] {
        assert_eq!(tier(m, "/v1/items"), Tier::Post);
    }
    for m in ["GET", "HEAD", "OPTIONS"] {
        assert_eq!(tier(m, "/v1/items"), Tier::Get);
    }
    assert_eq!(tier("GET", "/v1/charges"), Tier::Get);
}

#[test]
fn test_mode_wins_over_everything() {
    let c = classifier(false);
    let mut f = facts("POST", "/v1/charges");
    f.authorization = Some(b"Bearer sk_test_abc");
    assert_eq!(c.classify(&f).tier, Tier::Test);
    let mut f = facts("POST", "/v1/charges");
    f.test_mode = Some(b"true");
    assert_eq!(c.classify(&f).tier, Tier::Test);
    let mut f = facts("GET", "/v1/items");
    f.test_mode = Some(b"false");
    assert_eq!(c.classify(&f).tier, Tier::Get);
    let mut f = facts("GET", "/v1/items");
    f.authorization = Some(b"Bearer sk_live_abc");
    assert_eq!(c.classify(&f).tier, Tier::Get);
}

#[test]
fn api_key_beats_ip_and_is_stable() {
    let c = classifier(false);
    let mut a = facts("GET", "/");
    a.authorization = Some(b"Bearer sk_live_1");
    let mut b = facts("GET", "/");
    b.authorization = Some(b"bearer  sk_live_1 ");
    b.peer = Some("10.9.9.9".parse().unwrap());
    assert_eq!(c.classify(&a).key, c.classify(&b).key);
    assert_ne!(c.classify(&a).ip, c.classify(&b).ip, "ip is kept apart");
    let mut other = facts("GET", "/");
    other.authorization = Some(b"Bearer sk_live_2");
    assert_ne!(c.classify(&a).key, c.classify(&other).key);
    // A non-bearer header falls back to the IP.
    let mut basic = facts("GET", "/");
    basic.authorization = Some(b"Basic Zm9vOmJhcg==");
    assert_eq!(c.classify(&basic).key, c.classify(&facts("GET", "/")).key);
}

#[test]
fn ipv6_is_keyed_by_its_64_prefix() {
    let c = classifier(false);
    let key = |ip: &str| {
        let mut f = facts("GET", "/");
        f.peer = Some(ip.parse().unwrap());
        c.classify(&f).key
    };
    assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
    assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    assert_eq!(key("::ffff:10.0.0.7"), key("10.0.0.7"));
    assert_ne!(key("10.0.0.7"), key("10.0.0.8"));
}

#[test]
fn forwarded_for_only_when_trusted() {
    let mut f = facts("GET", "/");
    f.forwarded_for = &[b"203.0.113.9, 198.51.100.7"];
    let direct = {
        let mut d = facts("GET", "/");
        d.peer = Some("198.51.100.7".parse().unwrap());
        d
    };
    let trusted = classifier(true);
    assert_eq!(trusted.classify(&f).key, trusted.classify(&direct).key);
    let untrusted = classifier(false);
    assert_eq!(
        untrusted.classify(&f).key,
        untrusted.classify(&facts("GET", "/")).key
    );
    // Garbage in the header falls back to the peer.
    let mut g = facts("GET", "/");
    g.forwarded_for = &[b"not an ip"];
    assert_eq!(
        trusted.classify(&g).key,
        trusted.classify(&facts("GET", "/")).key
    );
}

fn key_of_ip(c: &Classifier, ip: &str) -> u64 {
    let mut d = facts("GET", "/");
    d.peer = Some(ip.parse().unwrap());
    c.classify(&d).key
}

#[test]
fn forwarded_for_lines_are_joined_and_the_nearest_proxy_wins() {
    let c = classifier(true);
    // The client wrote its own line; HAProxy appended another one with the real address.
    let mut f = facts("GET", "/");
    f.forwarded_for = &[b"6.6.6.6", b"198.51.100.7"];
    assert_eq!(c.classify(&f).key, key_of_ip(&c, "198.51.100.7"));
    // Several entries over several lines, with ports and IPv6 in brackets.
    f.forwarded_for = &[b"1.1.1.1, 2.2.2.2", b"[2001:db8::1]:4711"];
    assert_eq!(c.classify(&f).key, key_of_ip(&c, "2001:db8::9"));
    f.forwarded_for = &[b"1.1.1.1", b"203.0.113.5:80, "];
    assert_eq!(c.classify(&f).key, key_of_ip(&c, "203.0.113.5"));
    // Two trusted proxies: the client is the second entry from the end, across lines.
    let two = Classifier::new(
        &ClassifierConfig {
            trust_forwarded_for: true,
            forwarded_for_hops: 2,
            ..ClassifierConfig::default()
        },
        1,
    )
    .unwrap();
    f.forwarded_for = &[b"6.6.6.6, 203.0.113.8", b"10.0.0.2"];
    assert_eq!(two.classify(&f).key, key_of_ip(&two, "203.0.113.8"));
    // Fewer entries than proxies: the peer.
    f.forwarded_for = &[b"10.0.0.2"];
    assert_eq!(two.classify(&f).key, key_of_ip(&two, "10.0.0.1"));
}

#[test]
fn the_apps_client_key_wins_and_is_stable() {
    let c = classifier(false);
    let mut f = facts("GET", "/");
    f.authorization = Some(b"Bearer sk_live_random_1");
    f.client = Some(ClientKey::new("cus_42"));
    let mut g = facts("GET", "/");
    g.authorization = Some(b"Bearer sk_live_random_2");
    g.client = Some(ClientKey::from("cus_42"));
    assert_eq!(c.classify(&f).key, c.classify(&g).key);
    g.client = Some(ClientKey::new("cus_43"));
    assert_ne!(c.classify(&f).key, c.classify(&g).key);
    assert_ne!(ClientKey::new("7"), ClientKey::from_u64(7));
    // The test-mode rule still reads the bearer key.
    f.authorization = Some(b"Bearer sk_test_1");
    assert_eq!(c.classify(&f).tier, Tier::Test);
}
