//! Classification: which tier a request belongs to and which key per-user limiters count it
//! against. Pure: it sees plain strings and bytes, never actix types.

pub(crate) use crate::schema::{RoutePattern, MAX_FORWARDED_LINES};

use crate::schema::ClassifierConfig;
use crate::tier::Tier;
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};

/// Header that marks a request as test-mode traffic.
pub(crate) const TEST_MODE_HEADER: &str = "brownout-test-mode";

/// Seed of [`ClientKey`]'s hash: fixed, so one client has the same key in every process.
const CLIENT_KEY_SEED: u64 = 0x6272_6f77_6e6f_7574; // "brownout"

/// A client identity named by the app (see `BrownoutBuilder::key_hook`): its verified customer
/// id, a token's subject, an account number. Hashed on creation with a fixed seed, so the same
/// client is the same key in every process, and nothing is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey(u64);

impl ClientKey {
    /// The key of a textual or binary identity.
    ///
    /// # Examples
    /// ```
    /// use brownout::ClientKey;
    ///
    /// // The same customer is the same key, in this process and every other.
    /// assert_eq!(ClientKey::new("cus_42"), ClientKey::new(b"cus_42"));
    /// assert_ne!(ClientKey::new("cus_42"), ClientKey::new("cus_43"));
    /// ```
    pub fn new(id: impl AsRef<[u8]>) -> Self {
        Self(foldhash::quality::FixedState::with_seed(CLIENT_KEY_SEED).hash_one(id.as_ref()))
    }

    /// The key of a numeric identity (kept apart from any textual one).
    pub fn from_u64(id: u64) -> Self {
        Self(foldhash::quality::FixedState::with_seed(CLIENT_KEY_SEED).hash_one((1u8, id)))
    }
}

impl From<&str> for ClientKey {
    fn from(id: &str) -> Self {
        Self::new(id)
    }
}

impl From<&String> for ClientKey {
    fn from(id: &String) -> Self {
        Self::new(id)
    }
}

impl From<u64> for ClientKey {
    fn from(id: u64) -> Self {
        Self::from_u64(id)
    }
}

/// The last [`MAX_FORWARDED_LINES`] of a request's `count` `X-Forwarded-For` lines (`values`,
/// in the order received), kept on the stack in `lines` (filled here: a request whose
/// classifier does not trust the header never makes the buffer; entries are read from the
/// end). Both front doors read the header so, each looking it up once.
#[inline]
pub(crate) fn forwarded_lines<'a>(
    count: usize,
    values: impl Iterator<Item = &'a [u8]>,
    lines: &'a mut Option<[&'a [u8]; MAX_FORWARDED_LINES]>,
) -> &'a [&'a [u8]] {
    let lines = lines.insert([&[]; MAX_FORWARDED_LINES]);
    let skip = count.saturating_sub(MAX_FORWARDED_LINES);
    let mut read = 0;
    for (slot, value) in lines.iter_mut().zip(values.skip(skip)) {
        *slot = value;
        read += 1;
    }
    let lines: &'a [&'a [u8]; MAX_FORWARDED_LINES] = lines;
    &lines[..read]
}

/// What the classifier needs to know about a request.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct RequestFacts<'a> {
    /// The HTTP method, e.g. `GET`.
    pub method: &'a str,
    /// The path the router matches on, without the query string: for actix, the
    /// percent-decoded path of `HttpRequest::match_info()` (`%63` is `c`, `%2F` stays encoded).
    /// Costs, quotas and critical routes are matched against it, so a request is classified on
    /// the route that will serve it, however its path was spelled.
    pub path: &'a str,
    /// The raw `Authorization` header.
    pub authorization: Option<&'a [u8]>,
    /// The raw `Brownout-Test-Mode` header.
    pub test_mode: Option<&'a [u8]>,
    /// Every `X-Forwarded-For` header line, in the order received (at most the last 8 are
    /// read).
    pub forwarded_for: &'a [&'a [u8]],
    /// The peer address of the connection.
    pub peer: Option<IpAddr>,
    /// The client as the app named it (its key hook); wins over the bearer key and the IP.
    pub client: Option<ClientKey>,
    /// A CORS preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`): the
    /// per-client limiters leave it alone unless `classifier.charge_preflights`.
    pub preflight: bool,
    /// The route that serves it, as the app's router names it (`/v1/items/{id}`, axum's
    /// `MatchedPath`, a gRPC method): adaptive_concurrency learns service time per route
    /// (with the method), so a cheap route beside slow ones is not read as a queue. `None`:
    /// the request's tier stands for its route.
    pub route: Option<&'a str>,
}

impl<'a> RequestFacts<'a> {
    /// A request of `method` to `path` (the routed path, see [`path`](Self::path)) with no
    /// headers, no peer address and no client named by the app; the `with_` methods add them.
    ///
    /// # Examples
    /// ```
    /// use brownout::classify::RequestFacts;
    ///
    /// let facts = RequestFacts::new("POST", "/v1/charges")
    ///     .with_authorization(b"Bearer sk_live_abc")
    ///     .with_peer([192, 0, 2, 7].into());
    /// assert_eq!(facts.method, "POST");
    /// ```
    pub const fn new(method: &'a str, path: &'a str) -> Self {
        Self {
            method,
            path,
            authorization: None,
            test_mode: None,
            forwarded_for: &[],
            peer: None,
            client: None,
            preflight: false,
            route: None,
        }
    }

    /// With the raw `Authorization` header.
    pub const fn with_authorization(mut self, value: &'a [u8]) -> Self {
        self.authorization = Some(value);
        self
    }

    /// With the raw `Brownout-Test-Mode` header.
    pub const fn with_test_mode(mut self, value: &'a [u8]) -> Self {
        self.test_mode = Some(value);
        self
    }

    /// With the `X-Forwarded-For` header lines, in the order received.
    pub const fn with_forwarded_for(mut self, lines: &'a [&'a [u8]]) -> Self {
        self.forwarded_for = lines;
        self
    }

    /// With the connection's peer address.
    pub const fn with_peer(mut self, peer: IpAddr) -> Self {
        self.peer = Some(peer);
        self
    }

    /// With the client as the app names it (wins over the bearer key and the IP).
    pub const fn with_client(mut self, client: ClientKey) -> Self {
        self.client = Some(client);
        self
    }

    /// With the route that serves it, as the router names it (a pattern, never the raw path:
    /// the first 64 routes named each get a class, later ones share one).
    pub const fn with_route(mut self, route: &'a str) -> Self {
        self.route = Some(route);
        self
    }

    /// As a CORS preflight: an `OPTIONS` request that carried `Origin` and
    /// `Access-Control-Request-Method` (any other `OPTIONS` is charged like any request).
    pub const fn as_preflight(mut self) -> Self {
        self.preflight = true;
        self
    }
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
    test_key_prefix: Option<String>,
    trust_forwarded_for: bool,
    /// Which `X-Forwarded-For` entry, counted from the end, is the client (1: the last).
    forwarded_for_hops: usize,
    /// Whether the `Brownout-Plan` header names the request-rate plan.
    pub trust_plan_header: bool,
    /// Whether requests with an API key need their IP hashed too (a quota is keyed by IP).
    pub hash_ips: bool,
    /// Whether `OPTIONS` requests count against the per-client limiters.
    pub charge_preflights: bool,
    hasher: foldhash::quality::FixedState,
    /// What it was compiled from.
    config: ClassifierConfig,
}

impl Classifier {
    /// The settings it was compiled from.
    pub fn config(&self) -> &ClassifierConfig {
        &self.config
    }

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
            forwarded_for_hops: config.forwarded_for_hops.max(1) as usize,
            trust_plan_header: config.trust_plan_header,
            hash_ips: true,
            charge_preflights: config.charge_preflights,
            hasher: foldhash::quality::FixedState::with_seed(seed),
            config: config.clone(),
        })
    }

    /// Whether `X-Forwarded-For` names the client (`classifier.trust_forwarded_for`).
    pub fn trusts_forwarded_for(&self) -> bool {
        self.trust_forwarded_for
    }

    /// Tier and key of a request.
    pub fn classify(&self, facts: &RequestFacts<'_>) -> Classified {
        let api_key = facts.authorization.and_then(bearer);
        let tier = self.tier(facts, api_key);
        let named = match (facts.client, api_key) {
            (Some(client), _) => Some(self.hasher.hash_one((4u8, client.0))),
            (None, Some(k)) => Some(self.hasher.hash_one((0u8, k))),
            (None, None) => None,
        };
        // The address is hashed only where it is the key or kept apart from it (one place:
        // out of line, a closure for it cost a call).
        let (key, ip) = match named {
            Some(key) if !self.hash_ips => (key, key),
            named => {
                let ip = match self.client_ip(facts) {
                    Some(ip) => self.hash_ip(ip),
                    None => self.hasher.hash_one(2u8),
                };
                (named.unwrap_or(ip), ip)
            }
        };
        Classified { tier, key, ip }
    }

    /// The tier alone. Test mode wins over every other rule. (Always inlined: out of line,
    /// `classify` paid a call for it on every request.)
    #[inline(always)]
    pub fn tier(&self, facts: &RequestFacts<'_>, api_key: Option<&[u8]>) -> Tier {
        let test_key = match (api_key, &self.test_key_prefix) {
            (Some(k), Some(prefix)) => !prefix.is_empty() && k.starts_with(prefix.as_bytes()),
            (None, _) | (_, None) => false,
        };
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

    /// The client address. When `X-Forwarded-For` is trusted: every header line joined in
    /// order, and the entry that the nearest trusted proxy added (the last one, or the
    /// `forwarded_for_hops`-th from the end); entries to its left are the client's own words.
    /// Else, or when that entry is missing or not an address, the peer.
    #[inline]
    fn client_ip(&self, facts: &RequestFacts<'_>) -> Option<IpAddr> {
        if self.trust_forwarded_for {
            if let Some(ip) = self.forwarded_ip(facts) {
                return Some(ip);
            }
        }
        facts.peer
    }

    /// The entry of `X-Forwarded-For` that the nearest trusted proxy added, if it is an
    /// address. (Out of line: only a classifier that trusts the header reads it.)
    #[inline(never)]
    fn forwarded_ip(&self, facts: &RequestFacts<'_>) -> Option<IpAddr> {
        let entry = facts
            .forwarded_for
            .iter()
            .rev()
            .flat_map(|line| line.rsplit(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|e| !e.is_empty())
            .nth(self.forwarded_for_hops - 1);
        entry.and_then(parse_ip)
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

/// An address as proxies write it: `203.0.113.9`, `2001:db8::1`, or with a port
/// (`203.0.113.9:4711`, `[2001:db8::1]:4711`).
fn parse_ip(entry: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(entry).ok()?;
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case, RFC 9110).
pub(crate) fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests;
