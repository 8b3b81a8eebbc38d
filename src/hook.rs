//! The app's hooks (the tier, the client key, the plan of a request) and the request they
//! see, [`HookRequest`]: the same type whichever front door runs them, the actix middleware or
//! the tower layer. A panicking hook fails open to the built-in rule, counted.

use crate::classify::{Classified, ClientKey, RequestFacts};
use crate::engine::{Engine, Settings};
use crate::tier::Tier;
#[cfg(feature = "actix")]
use actix_web::HttpMessage;
#[cfg(feature = "actix")]
use std::cell::Ref;
use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// A user hook: what it says of a request, or `None` for the built-in rule.
pub type Hook<T> = Arc<dyn Fn(&HookRequest<'_>) -> Option<T> + Send + Sync>;

/// A user hook that overrides the tier of a request (`None` keeps the built-in rules).
pub type TierHook = Hook<Tier>;

/// A user hook that names the client a request's per-user limits count against (`None`: the
/// bearer API key, else the client IP).
pub type KeyHook = Hook<ClientKey>;

/// A user hook that names the request-rate plan of a request (`None`: the default plan).
pub type PlanHook = Hook<Arc<str>>;

/// A request as the app's hooks see it, from actix or from a tower service: its method, path,
/// peer address, headers and extensions (where an authentication layer leaves what it
/// verified).
///
/// # Examples
/// ```
/// # use brownout::{Brownout, ClientKey, Config};
/// #[derive(Clone)]
/// struct Customer { id: String } // inserted by your authentication middleware
///
/// let brownout = Brownout::builder(Config::default())
///     .key_hook(|req| req.extensions().get::<Customer>().map(|c| ClientKey::new(&c.id)))
///     .tier_hook(|req| (req.path() == "/internal/health").then_some(brownout::Tier::Critical))
///     .plan_hook(|req| req.headers().get("x-plan").and_then(|v| v.to_str()).map(Into::into))
///     .build()
///     .unwrap();
/// ```
pub struct HookRequest<'a> {
    method: &'a str,
    path: &'a str,
    peer: Option<IpAddr>,
    source: Source<'a>,
}

/// Where a [`HookRequest`]'s headers and extensions are.
#[derive(Clone, Copy)]
enum Source<'a> {
    #[cfg(feature = "actix")]
    Actix(&'a actix_web::dev::ServiceRequest),
    #[cfg(feature = "tower")]
    Http(&'a http::HeaderMap, &'a http::Extensions),
    /// No front door is built (neither `actix` nor `tower`): nothing makes a request.
    #[cfg(not(any(feature = "actix", feature = "tower")))]
    #[allow(dead_code)]
    None(std::marker::PhantomData<&'a ()>),
}

impl<'a> HookRequest<'a> {
    /// An actix request, with the path its router matches on.
    #[cfg(feature = "actix")]
    pub(crate) fn actix(req: &'a actix_web::dev::ServiceRequest, path: &'a str) -> Self {
        Self {
            method: req.method().as_str(),
            path,
            peer: req.peer_addr().map(|a| a.ip()),
            source: Source::Actix(req),
        }
    }

    /// An `http` 1 request (the tower layer).
    #[cfg(feature = "tower")]
    pub(crate) fn http<B>(req: &'a http::Request<B>, peer: Option<IpAddr>) -> Self {
        Self {
            method: req.method().as_str(),
            path: req.uri().path(),
            peer,
            source: Source::Http(req.headers(), req.extensions()),
        }
    }

    /// The method, e.g. `"POST"`.
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The path the router matches on (without the query string).
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The connection's peer address, when the server gives it.
    pub fn peer_ip(&self) -> Option<IpAddr> {
        self.peer
    }

    /// The request's headers.
    pub fn headers(&self) -> HookHeaders<'a> {
        HookHeaders(self.source)
    }

    /// The request's extensions, where the app's earlier layers leave what they verified.
    pub fn extensions(&self) -> HookExtensions<'a> {
        match self.source {
            #[cfg(feature = "actix")]
            Source::Actix(req) => HookExtensions(Extensions::Actix(req.extensions())),
            #[cfg(feature = "tower")]
            Source::Http(_, extensions) => HookExtensions(Extensions::Http(extensions)),
            #[cfg(not(any(feature = "actix", feature = "tower")))]
            Source::None(_) => HookExtensions(Extensions::None(std::marker::PhantomData)),
        }
    }

    /// The actix request itself, for what this type does not carry (`None` in the tower
    /// layer).
    #[cfg(feature = "actix")]
    pub fn actix_request(&self) -> Option<&'a actix_web::dev::ServiceRequest> {
        match self.source {
            Source::Actix(req) => Some(req),
            #[cfg(feature = "tower")]
            Source::Http(..) => None,
        }
    }
}

/// A request's headers, as hooks read them ([`HookRequest::headers`]).
pub struct HookHeaders<'a>(Source<'a>);

impl<'a> HookHeaders<'a> {
    /// The first value of the header `name` (case-insensitive), if any.
    #[cfg_attr(
        not(any(feature = "actix", feature = "tower")),
        allow(unused_variables, unreachable_code)
    )]
    pub fn get(&self, name: &str) -> Option<HookHeaderValue<'a>> {
        let bytes = match self.0 {
            #[cfg(feature = "actix")]
            Source::Actix(req) => req.headers().get(name)?.as_bytes(),
            #[cfg(feature = "tower")]
            Source::Http(headers, _) => headers.get(name)?.as_bytes(),
            #[cfg(not(any(feature = "actix", feature = "tower")))]
            Source::None(_) => return None,
        };
        Some(HookHeaderValue(bytes))
    }
}

/// A header's value ([`HookHeaders::get`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookHeaderValue<'a>(&'a [u8]);

impl<'a> HookHeaderValue<'a> {
    /// The value's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The value as text, when it is visible ASCII.
    pub fn to_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.0)
            .ok()
            .filter(|s| s.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))
    }
}

/// A request's extensions, as hooks read them ([`HookRequest::extensions`]).
pub struct HookExtensions<'a>(Extensions<'a>);

enum Extensions<'a> {
    #[cfg(feature = "actix")]
    Actix(Ref<'a, actix_web::dev::Extensions>),
    #[cfg(feature = "tower")]
    Http(&'a http::Extensions),
    #[cfg(not(any(feature = "actix", feature = "tower")))]
    None(std::marker::PhantomData<&'a ()>),
}

impl HookExtensions<'_> {
    /// The extension of type `T`, if the request has one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        match &self.0 {
            #[cfg(feature = "actix")]
            Extensions::Actix(extensions) => extensions.get::<T>(),
            #[cfg(feature = "tower")]
            Extensions::Http(extensions) => extensions.get::<T>(),
            #[cfg(not(any(feature = "actix", feature = "tower")))]
            Extensions::None(_) => None,
        }
    }
}

/// The app's hooks, run by the middleware and the layer on each request (set on the builder).
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) tier: Option<TierHook>,
    pub(crate) key: Option<KeyHook>,
    pub(crate) plan: Option<PlanHook>,
}

impl Hooks {
    /// Whether any hook is set (a request builds its [`HookRequest`] only then).
    pub(crate) fn any(&self) -> bool {
        self.tier.is_some() || self.key.is_some() || self.plan.is_some()
    }

    /// A request's client and tier, as both front doors decide them: the classifier on
    /// `facts`, with the client the key hook names and the tier the tier hook sets (`hooked`:
    /// the request as they see it, made only when a hook is set).
    #[inline]
    pub(crate) fn classify(
        &self,
        engine: &Engine,
        settings: &Settings,
        facts: &mut RequestFacts<'_>,
        hooked: Option<&HookRequest<'_>>,
    ) -> Classified {
        if let Some(hooked) = hooked {
            facts.client = self.key(engine, hooked);
        }
        let mut classified = settings.classifier.classify(facts);
        if let Some(tier) = hooked.and_then(|h| self.tier(engine, h)) {
            classified.tier = tier;
        }
        classified
    }

    /// The client the key hook names.
    pub(crate) fn key(&self, engine: &Engine, req: &HookRequest<'_>) -> Option<ClientKey> {
        run(
            engine,
            self.key.as_ref()?,
            req,
            "key hook; using the bearer key or IP",
        )
    }

    /// The tier the tier hook sets.
    pub(crate) fn tier(&self, engine: &Engine, req: &HookRequest<'_>) -> Option<Tier> {
        run(
            engine,
            self.tier.as_ref()?,
            req,
            "tier hook; using the built-in rules",
        )
    }

    /// The plan the plan hook names.
    pub(crate) fn plan(&self, engine: &Engine, req: &HookRequest<'_>) -> Option<Arc<str>> {
        run(
            engine,
            self.plan.as_ref()?,
            req,
            "plan hook; using the default plan",
        )
    }
}

/// `hook` on `req`; a panic fails open (`None`), counted and logged as the `what` panicking.
fn run<T>(engine: &Engine, hook: &Hook<T>, req: &HookRequest<'_>, what: &'static str) -> Option<T> {
    catch_unwind(AssertUnwindSafe(|| hook(req))).unwrap_or_else(|_| {
        engine.fail_open("classifier", "panic", || format!("panic in the {what}"));
        None
    })
}
