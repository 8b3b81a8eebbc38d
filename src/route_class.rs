//! Route classes: a small, bounded set of ids for the routes an app serves, so that service
//! time is learned per route and a window is judged against the expected time of its own mix
//! (a cheap route's share moving from window to window is not queueing).
//!
//! A route is a method and a route pattern (`GET /v1/items/{id}`): what the router matched,
//! never the raw path, so ids and query strings do not mint classes. The first [`ROUTES`]
//! routes seen get an id each; later ones share [`RouteClass::other`]; a request no route
//! matched (the router's 404 or 405) is [`RouteClass::unmatched`]. A class is a route *and* a
//! tier (`route × 4 + tier`), so each tier's service time is its own routes' mix.
//!
//! The lookup on the request path is lock-free and allocates nothing: a route is named by a
//! 64-bit hash of its method and pattern, found in a fixed open-addressed table. Only the
//! first request of a new route takes a lock and stores its name (for `/v1/state`).

use crate::tier::Tier;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

/// Routes that get an id of their own.
pub const ROUTES: usize = 64;

/// Route slots: the learned routes, then "unmatched" and "other".
const SLOTS: usize = ROUTES + 2;

/// Every class: each route slot in each tier.
pub const CLASSES: usize = SLOTS * 4;

/// Entries of the hash table (twice the routes: probes stay short).
const TABLE: usize = ROUTES * 2;

/// Seed of a route's hash (fixed: the same route is the same hash in every process).
const ROUTE_SEED: u64 = 0x726f_7574_6563_6c73; // "routecls"

/// A request's route class: its route and its tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteClass(u16);

impl RouteClass {
    /// Route `route` (its slot) in `tier`.
    const fn of(route: usize, tier: Tier) -> Self {
        Self((route * 4 + tier.index()) as u16)
    }

    /// Route slot `route` (from [`RouteClasses::find`]) in `tier`.
    pub const fn from_route(route: usize, tier: Tier) -> Self {
        Self::of(route, tier)
    }

    /// Requests of `tier` whose route is not known (a caller that named none, or a route past
    /// the first [`ROUTES`]).
    pub const fn other(tier: Tier) -> Self {
        Self::of(ROUTES + 1, tier)
    }

    /// Requests of `tier` that no route matched (the router answered 404 or 405).
    pub const fn unmatched(tier: Tier) -> Self {
        Self::of(ROUTES, tier)
    }

    /// Position in per-class arrays (`0..CLASSES`).
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The class at `index` (`index < CLASSES`).
    pub const fn from_index(index: usize) -> Self {
        Self(index as u16)
    }

    /// Its tier.
    pub const fn tier(self) -> Tier {
        Tier::ALL[self.0 as usize % 4]
    }

    /// Its route slot (`ROUTES` for unmatched, `ROUTES + 1` for other).
    pub const fn route(self) -> usize {
        self.0 as usize / 4
    }

    /// The same route in `tier`.
    pub const fn in_tier(self, tier: Tier) -> Self {
        Self::of(self.route(), tier)
    }
}

impl From<Tier> for RouteClass {
    /// Requests of `tier` on no known route ([`RouteClass::other`]).
    fn from(tier: Tier) -> Self {
        Self::other(tier)
    }
}

/// The tier of each class, for the pure math (`Tier::index` order).
pub const fn tier_index(class: usize) -> usize {
    class % 4
}

/// The hash that names a route: its method and pattern, fed to [`RouteHasher`] piece by
/// piece.
pub struct RouteHasher(foldhash::quality::FoldHasher<'static>);

impl std::fmt::Debug for RouteHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouteHasher")
    }
}

impl RouteHasher {
    /// A route of `method` (methods are case-sensitive: `post` is not `POST`; methods outside
    /// the standard nine are one method, so a client cannot mint routes by inventing them).
    pub fn new(method: &str) -> Self {
        Self::of_method(method_code(method))
    }

    /// A route of the method whose [`method_code`] is `code` (for a framework whose method
    /// is an enum: the same hash as [`new`](Self::new) with the method's name).
    #[inline]
    pub fn of_method(code: u8) -> Self {
        const STATE: foldhash::quality::FixedState =
            foldhash::quality::FixedState::with_seed(ROUTE_SEED);
        let mut h = STATE.build_hasher();
        h.write_u8(code);
        Self(h)
    }

    /// Adds a piece of the pattern.
    #[inline]
    pub fn write(&mut self, piece: &str) {
        self.0.write(piece.as_bytes());
    }

    /// The route's hash (never 0, which marks an empty entry).
    #[inline]
    pub fn finish(&self) -> u64 {
        self.0.finish().max(1)
    }
}

/// The standard nine methods, in the order of their [`method_code`] (1 to 9).
pub const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
];

/// `method`'s place in [`METHODS`] from 1, or 0 for any other method (one class for all of
/// them).
pub fn method_code(method: &str) -> u8 {
    METHODS
        .iter()
        .position(|&m| m == method)
        .map_or(0, |i| i as u8 + 1)
}

/// `method` if it is one of the standard nine, else `"*"`.
fn standard_method(method: &str) -> &str {
    match method_code(method) {
        0 => "*",
        _ => method,
    }
}

/// The routes seen, each with its id.
#[derive(Debug)]
pub struct RouteClasses {
    /// Open-addressed: a route's hash, or 0.
    hashes: [AtomicU64; TABLE],
    /// The route slot of each entry (written before its hash is published).
    slots: [AtomicU8; TABLE],
    /// Each learned route's name (`GET /v1/items/{id}`), once it has an id.
    names: [OnceLock<Box<str>>; ROUTES],
    /// Serializes new entries (the first request of a route).
    adding: Mutex<usize>,
}

impl Default for RouteClasses {
    fn default() -> Self {
        Self {
            hashes: std::array::from_fn(|_| AtomicU64::new(0)),
            slots: std::array::from_fn(|_| AtomicU8::new(0)),
            names: std::array::from_fn(|_| OnceLock::new()),
            adding: Mutex::new(0),
        }
    }
}

impl RouteClasses {
    /// The route slot of `hash`, if it was seen (lock-free, no allocation).
    #[inline]
    pub fn find(&self, hash: u64) -> Option<usize> {
        let start = (hash as usize) % TABLE;
        for i in 0..TABLE {
            let at = (start + i) % TABLE;
            match self.hashes[at].load(Ordering::Acquire) {
                0 => return None,
                h if h == hash => return Some(usize::from(self.slots[at].load(Ordering::Relaxed))),
                _ => {}
            }
        }
        None
    }

    /// The class of a request of `tier` on the route named `hash`, whose name `name` gives
    /// (called only when the route was not found: the first request of each route).
    pub fn add(&self, hash: u64, tier: Tier, name: impl FnOnce() -> String) -> RouteClass {
        if let Some(slot) = self.find(hash) {
            return RouteClass::of(slot, tier);
        }
        let mut next = self
            .adding
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = self.find(hash) {
            return RouteClass::of(slot, tier);
        }
        let slot = if *next < ROUTES {
            let name = name();
            // Two hashes of one route (a pattern spelled two ways) share its id.
            let known = (0..*next).find(|&i| self.names[i].get().is_some_and(|n| **n == *name));
            known.unwrap_or_else(|| {
                let i = *next;
                let _ = self.names[i].set(name.into_boxed_str());
                *next += 1;
                i
            })
        } else {
            ROUTES + 1
        };
        // Past the table's room a route stays out of it: "other", found again under the lock
        // (never allocating: its name is not asked for once every id is taken).
        let start = (hash as usize) % TABLE;
        for i in 0..TABLE {
            let at = (start + i) % TABLE;
            if self.hashes[at].load(Ordering::Relaxed) == 0 {
                self.slots[at].store(slot as u8, Ordering::Relaxed);
                self.hashes[at].store(hash, Ordering::Release);
                break;
            }
        }
        RouteClass::of(slot, tier)
    }

    /// The name of route slot `route` (`unmatched`, `other` for the last two).
    pub fn name(&self, route: usize) -> Option<&str> {
        match route {
            r if r < ROUTES => self.names[r].get().map(|n| &**n),
            ROUTES => Some("unmatched"),
            _ => Some("other"),
        }
    }

    /// The class of a request of `tier` on the route `route` (a pattern, e.g.
    /// `/v1/items/{id}`) with `method`: for callers that know the route they serve
    /// (`RequestFacts::with_route`).
    pub fn of_pattern(&self, method: &str, route: &str, tier: Tier) -> RouteClass {
        let mut h = RouteHasher::new(method);
        h.write(route);
        let hash = h.finish();
        match self.find(hash) {
            Some(slot) => RouteClass::of(slot, tier),
            None => self.add(hash, tier, || {
                format!("{} {route}", standard_method(method))
            }),
        }
    }
}

#[cfg(test)]
#[path = "route_class_tests.rs"]
mod tests;
#[cfg(test)]
pub(crate) use tests::on_one_route;
