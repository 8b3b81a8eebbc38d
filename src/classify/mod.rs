//! Classification: which tier a request belongs to and which key per-user limiters count it
//! against. Pure: it sees plain strings and bytes, never actix types.

mod route;

pub use route::RoutePattern;

use crate::config::ClassifierConfig;
use crate::tier::Tier;
use std::hash::BuildHasher;
use std::net::IpAddr;

/// Header that marks a request as test-mode traffic.
pub const TEST_MODE_HEADER: &str = "brownout-test-mode";

/// What the classifier needs to know about a request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestFacts<'a> {
    /// The HTTP method, e.g. `GET`.
    pub method: &'a str,
    /// The path, without the query string.
    pub path: &'a str,
    /// The raw `Authorization` header.
    pub authorization: Option<&'a [u8]>,
    /// The raw `Brownout-Test-Mode` header.
    pub test_mode: Option<&'a [u8]>,
    /// The raw `X-Forwarded-For` header.
    pub forwarded_for: Option<&'a [u8]>,
    /// The peer address of the connection.
    pub peer: Option<IpAddr>,
}

/// A request's tier and the hash of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// Its priority tier.
    pub tier: Tier,
    /// The hash of its API key, client IP (IPv6 by /64), or of nothing.
    pub key: u64,
    /// The hash of its client IP alone, for per-IP quotas. When no quota is keyed by IP and
    /// the request has an API key, the IP is not hashed and this equals `key`.
    pub ip: u64,
}

/// Tier rules and key extraction compiled from [`ClassifierConfig`].
#[derive(Debug, Clone)]
pub struct Classifier {
    critical: Vec<RoutePattern>,
    test_key_prefix: String,
    trust_forwarded_for: bool,
    /// Whether the `Brownout-Plan` header names the request-rate plan.
    pub trust_plan_header: bool,
    /// Whether requests with an API key need their IP hashed too (a quota is keyed by IP).
    pub hash_ips: bool,
    hasher: foldhash::quality::FixedState,
}

impl Classifier {
    /// Compiles the rules; `seed` keys the hash of client keys.
    pub fn new(config: &ClassifierConfig, seed: u64) -> Result<Self, String> {
        let critical = config
            .critical
            .iter()
            .map(|r| RoutePattern::parse(r))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            critical,
            test_key_prefix: config.test_key_prefix.clone(),
            trust_forwarded_for: config.trust_forwarded_for,
            trust_plan_header: config.trust_plan_header,
            hash_ips: true,
            hasher: foldhash::quality::FixedState::with_seed(seed),
        })
    }

    /// Tier and key of a request.
    pub fn classify(&self, facts: &RequestFacts<'_>) -> Classified {
        let api_key = facts.authorization.and_then(bearer);
        let tier = self.tier(facts, api_key);
        let ip = || match self.client_ip(facts) {
            Some(ip) => self.hash_ip(ip),
            None => self.hasher.hash_one(2u8),
        };
        let (key, ip) = match api_key {
            Some(k) => {
                let key = self.hasher.hash_one((0u8, k));
                (key, if self.hash_ips { ip() } else { key })
            }
            None => {
                let ip = ip();
                (ip, ip)
            }
        };
        Classified { tier, key, ip }
    }

    /// The tier alone. Test mode wins over every other rule.
    pub fn tier(&self, facts: &RequestFacts<'_>, api_key: Option<&[u8]>) -> Tier {
        let test_key = api_key.is_some_and(|k| k.starts_with(self.test_key_prefix.as_bytes()));
        let test_header = facts
            .test_mode
            .is_some_and(|v| v.eq_ignore_ascii_case(b"true") || v == b"1");
        if test_key || test_header {
            Tier::Test
        } else if self
            .critical
            .iter()
            .any(|r| r.matches(facts.method, facts.path))
        {
            Tier::Critical
        } else if matches!(facts.method, "GET" | "HEAD" | "OPTIONS") {
            Tier::Get
        } else {
            Tier::Post
        }
    }

    /// The client address: the last `X-Forwarded-For` entry (the one your proxy appended)
    /// when trusted, else the peer.
    fn client_ip(&self, facts: &RequestFacts<'_>) -> Option<IpAddr> {
        if self.trust_forwarded_for {
            let forwarded = facts
                .forwarded_for
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.rsplit(',').next())
                .and_then(|v| v.trim().parse().ok());
            if forwarded.is_some() {
                return forwarded;
            }
        }
        facts.peer
    }

    /// IPv4 by address, IPv6 by its /64 so one host cannot mint unbounded keys.
    fn hash_ip(&self, ip: IpAddr) -> u64 {
        match ip {
            IpAddr::V4(v4) => self.hasher.hash_one((1u8, v4.octets())),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => self.hasher.hash_one((1u8, v4.octets())),
                None => {
                    let o = v6.octets();
                    let mut prefix = [0u8; 8];
                    prefix.copy_from_slice(&o[..8]);
                    self.hasher.hash_one((3u8, prefix))
                }
            },
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classifier(trust_xff: bool) -> Classifier {
        let cfg = ClassifierConfig {
            trust_forwarded_for: trust_xff,
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
    fn default_tier_rules() {
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
        f.forwarded_for = Some(b"203.0.113.9, 198.51.100.7");
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
        g.forwarded_for = Some(b"not an ip");
        assert_eq!(
            trusted.classify(&g).key,
            trusted.classify(&facts("GET", "/")).key
        );
    }
}
