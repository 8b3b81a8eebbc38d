//! What the layer reads of a request: its client and tier (the classifier, with the app's
//! hooks), its peer address, the route it is served on, and the request as the limiters see
//! it.

use super::{BrownoutTower, FORWARDED_FOR, TEST_MODE};
use crate::classify::{forwarded_lines, Classified, RequestFacts, MAX_FORWARDED_LINES};
use crate::engine::{Engine, RequestHold, Settings};
use crate::hook::HookRequest;
use crate::limiter::Request as LimiterRequest;
use crate::tier::Tier;
use http::header::{HeaderValue, AUTHORIZATION};
use http::Request;
use std::net::{IpAddr, SocketAddr};

impl<S> BrownoutTower<S> {
    /// The request's client and tier, and the facts they were read from (the limiters'
    /// request takes its method, path and preflight from them). `lines` holds the
    /// `X-Forwarded-For` lines, filled only when the header is trusted.
    pub(super) fn classify<'r, B>(
        &self,
        req: &'r Request<B>,
        (peer, hooked): (Option<IpAddr>, Option<&HookRequest<'_>>),
        settings: &Settings,
        lines: &'r mut Option<[&'r [u8]; MAX_FORWARDED_LINES]>,
    ) -> (Classified, RequestFacts<'r>) {
        let headers = req.headers();
        let forwarded: &[&[u8]] = if settings.classifier.trusts_forwarded_for() {
            let all = headers.get_all(FORWARDED_FOR);
            let values = all.iter().map(HeaderValue::as_bytes);
            forwarded_lines(all.iter().count(), values, lines)
        } else {
            &[]
        };
        let mut facts = RequestFacts {
            method: req.method().as_str(),
            path: req.uri().path(),
            authorization: headers.get(AUTHORIZATION).map(HeaderValue::as_bytes),
            test_mode: headers.get(TEST_MODE).map(HeaderValue::as_bytes),
            forwarded_for: forwarded,
            peer,
            client: None,
            preflight: is_preflight(req),
            route: None,
        };
        let classified = self
            .hooks
            .classify(&self.engine, settings, &mut facts, hooked);
        (classified, facts)
    }
}

/// The peer address: axum's `ConnectInfo` (feature `axum`), tonic's `TcpConnectInfo` (feature
/// `tonic`), or a `SocketAddr` the server put in the request's extensions.
pub(super) fn peer<B>(req: &Request<B>) -> Option<IpAddr> {
    let peer = peer_addr(req.extensions()).map(|addr| addr.ip());
    if peer.is_none() {
        no_peer_warning();
    }
    peer
}

/// The peer's address as the server left it in a request's extensions (see [`peer`]); the
/// admin service reads it too, for its audit log.
#[inline]
pub(crate) fn peer_addr(extensions: &http::Extensions) -> Option<SocketAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0);
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
    {
        return Some(addr);
    }
    extensions.get::<SocketAddr>().copied()
}

/// Tells the operator, once per process, that requests come without a peer address: every
/// client without a key then counts as one, and the per-IP ceiling is one for all.
#[cold]
fn no_peer_warning() {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        crate::logging::notice(
            crate::logging::Level::Warn,
            "a request reached brownout's tower layer without its peer address: clients without \
             a key share one bucket, and the per-IP ceiling is one for all. Serve axum with \
             into_make_service_with_connect_info::<SocketAddr>(), build brownout with its tonic \
             feature for tonic, or put the SocketAddr in the request's extensions (hyper)",
        );
    });
}

/// The route that serves `req` as its router names it: axum's `MatchedPath` (feature `axum`),
/// or the gRPC method's path.
fn route<B>(req: &Request<B>, grpc: bool) -> Option<&str> {
    #[cfg(feature = "axum")]
    if let Some(matched) = req.extensions().get::<axum::extract::MatchedPath>() {
        return Some(matched.as_str());
    }
    grpc.then(|| req.uri().path())
}

/// The request as the limiters see it.
pub(super) fn limiter_request<'a, B>(
    req: &'a Request<B>,
    c: &Classified,
    plan: Option<&'a str>,
) -> LimiterRequest<'a> {
    LimiterRequest {
        tier: c.tier,
        key: c.key,
        ip: c.ip,
        method: req.method().as_str(),
        path: req.uri().path(),
        plan,
        preflight: is_preflight(req),
        paid: false,
    }
}

/// Tells `hold` the route class its latency teaches, when it teaches one and `req`'s route is
/// known (looked up only then: a request that holds no adaptive_concurrency slot pays nothing).
pub(super) fn learn_route<B>(
    hold: &mut RequestHold,
    engine: &Engine,
    req: &Request<B>,
    tier: Tier,
    grpc: bool,
) {
    if !hold.learns_latency() {
        return;
    }
    if let Some(route) = route(req, grpc) {
        let routes = engine.adaptive().routes();
        hold.set_route(routes.of_pattern(req.method().as_str(), route, tier));
    }
}

/// Whether `req` is a CORS preflight (`OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`).
fn is_preflight<B>(req: &Request<B>) -> bool {
    let headers = req.headers();
    req.method() == http::Method::OPTIONS
        && headers.contains_key(http::header::ORIGIN)
        && headers.contains_key(http::header::ACCESS_CONTROL_REQUEST_METHOD)
}
