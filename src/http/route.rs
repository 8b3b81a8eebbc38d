//! The route class of an answered request, from what actix's router matched: the method and
//! the matched pattern, its dynamic segments named rather than valued (`/v1/items/{id}`, not
//! `/v1/items/42`), so ids and invented paths mint no class. Read once the app has answered
//! (the middleware runs before routing), with no allocation but on a route's first request.

use crate::route_class::{RouteClass, RouteClasses, RouteHasher};
use crate::tier::Tier;
use actix_web::http::{Method, StatusCode};
use actix_web::HttpRequest;
use arrayvec::ArrayVec;

/// Most dynamic segments of a pattern told apart (more are hashed as written).
const MAX_SEGMENTS: usize = 16;

/// The route class of `req`, of `tier`, answered with `status`.
pub(super) fn route_class(
    routes: &RouteClasses,
    req: &HttpRequest,
    status: StatusCode,
    tier: Tier,
) -> RouteClass {
    let info = req.match_info();
    // The router's own answer to a path or method it has no route for.
    if info.is_empty()
        && matches!(
            status,
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
        )
    {
        return RouteClass::unmatched(tier);
    }
    let path = info.as_str();
    let mut h = RouteHasher::of_method(method_code(req.method()));
    if info.segment_count() == 0 {
        // A pattern with no dynamic segment: the path is the pattern.
        h.write(path);
    } else {
        hash_segments(&mut h, path, info);
    }
    let hash = h.finish();
    if let Some(route) = routes.find(hash) {
        return RouteClass::from_route(route, tier);
    }
    // A route's first request: the router's own pattern names it (a path the router did not
    // match, answered by a default service, allocates nothing here and is "unmatched").
    match req.match_pattern() {
        Some(pattern) => routes.add(hash, tier, || format!("{} {pattern}", req.method())),
        None => RouteClass::unmatched(tier),
    }
}

/// Hashes the pattern `path` was matched on into `h`: its literal parts as written, each
/// dynamic segment by its name.
fn hash_segments(
    h: &mut RouteHasher,
    path: &str,
    info: &actix_web::dev::Path<actix_web::dev::Url>,
) {
    let base = path.as_ptr() as usize;
    // The dynamic segments' places in the path (their values are slices of it).
    let mut spans: ArrayVec<(usize, usize, &str), MAX_SEGMENTS> = ArrayVec::new();
    for (name, value) in info.iter() {
        let at = (value.as_ptr() as usize).wrapping_sub(base);
        if at <= path.len() && value.len() <= path.len() - at && !spans.is_full() {
            spans.push((at, at + value.len(), name));
        }
    }
    spans.sort_unstable_by_key(|&(at, _, _)| at);
    let mut pos = 0;
    for &(start, end, name) in &spans {
        if start < pos || !path.is_char_boundary(start) || !path.is_char_boundary(end) {
            continue;
        }
        h.write(&path[pos..start]);
        h.write("{");
        h.write(name);
        h.write("}");
        pos = end;
    }
    h.write(path.get(pos..).unwrap_or_default());
}

/// `method`'s [`crate::route_class::method_code`], from actix's method itself (compared as
/// an enum: no string compared on the request path).
#[inline]
fn method_code(method: &Method) -> u8 {
    // In the order of `route_class::METHODS` (a test holds the two to each other).
    let standard = [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
        Method::CONNECT,
        Method::TRACE,
    ];
    standard
        .iter()
        .position(|m| m == method)
        .map_or(0, |i| i as u8 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route_class::{self, METHODS};

    #[test]
    fn actix_methods_have_the_codes_of_their_names() {
        for name in METHODS {
            let method = Method::from_bytes(name.as_bytes()).unwrap();
            assert_eq!(
                method_code(&method),
                route_class::method_code(name),
                "{name}"
            );
            assert_ne!(method_code(&method), 0, "{name}");
        }
        for invented in ["get", "PURGE", "BREW"] {
            let method = Method::from_bytes(invented.as_bytes()).unwrap();
            assert_eq!(method_code(&method), 0, "{invented}");
            assert_eq!(route_class::method_code(invented), 0, "{invented}");
        }
    }
}
