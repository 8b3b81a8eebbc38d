//! The hold an admitted request keeps until its response is done: its place in the in-flight
//! count and its limiter permits, all released when it is dropped.

use super::{Admission, Engine};
use crate::route_class::RouteClass;
use crate::store::{Keyed, KeyedHandle, Table};
use crate::tier::Tier;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How a hold reaches the engine when it is dropped.
///
/// The middleware's holds use their worker's own `Rc`: cloning and dropping it per request
/// writes nothing that another worker reads (an `Arc` clone would bounce its reference count
/// between the cores of every worker). `Brownout::check`, whose hold may move between
/// threads, uses the `Arc`.
pub(crate) trait EngineRef: KeyedHandle {
    /// The engine.
    fn engine(&self) -> &Engine;
}

impl EngineRef for Arc<Engine> {
    fn engine(&self) -> &Engine {
        self
    }
}

impl KeyedHandle for Arc<Engine> {
    fn keyed(&self) -> &Keyed {
        &self.keyed
    }
}

impl KeyedHandle for Rc<WorkerEngine> {
    fn keyed(&self) -> &Keyed {
        &self.0.keyed
    }
}

/// A worker's own handle on the engine, shared through an `Rc` by its requests.
pub(crate) struct WorkerEngine(pub(crate) Arc<Engine>);

impl std::ops::Deref for WorkerEngine {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.0
    }
}

impl EngineRef for Rc<WorkerEngine> {
    fn engine(&self) -> &Engine {
        &self.0
    }
}

/// Everything an admitted request holds until its response is done: its place in the
/// in-flight count and the permits its admission kept. Dropping it leaves the count and gives
/// the permits back, through the one handle it holds.
///
/// Packed (40 bytes): it rides in the response future and then in the response body, which
/// actix moves whole several times per request.
pub(crate) struct RequestHold<P: EngineRef = Arc<Engine>> {
    engine: P,
    /// The key of the concurrency permit kept, if `concurrency` is set.
    concurrency_key: u64,
    /// When the request was admitted (ns of the engine's clock), if it holds an
    /// adaptive-concurrency slot (of `tier`); [`NO_SLOT`] if not.
    adaptive_at: u64,
    /// Where its permit and fleet slot are held.
    held: crate::store::Held,
    /// The table of the concurrency permit kept.
    concurrency: Option<Table>,
    /// Whether a fleet slot was kept.
    fleet: Option<Table>,
    tier: Tier,
    /// Its route class (the route it was answered on, once known; its tier's "other" until
    /// then), whose service time its latency teaches.
    class: RouteClass,
    /// Whether it entered the in-flight count (a request waiting for adaptive_concurrency's
    /// room enters when it is let through).
    entered: bool,
}

/// `adaptive_at` of a hold without an adaptive-concurrency slot.
const NO_SLOT: u64 = u64::MAX;

/// When a hold whose `adaptive_at` this is was admitted (ns of the engine's clock), if it
/// still holds an adaptive-concurrency slot (which it gives up here).
fn leave_adaptive(adaptive_at: &mut u64) -> Option<u64> {
    let at = std::mem::replace(adaptive_at, NO_SLOT);
    (at != NO_SLOT).then_some(at)
}

/// `at` as a hold keeps it (ns; an instant past 584 years of uptime saturates just short of
/// [`NO_SLOT`]).
#[inline]
fn slot_at(at: Duration) -> u64 {
    u64::try_from(at.as_nanos())
        .unwrap_or(NO_SLOT - 1)
        .min(NO_SLOT - 1)
}

impl<P: EngineRef> std::fmt::Debug for RequestHold<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHold")
            .field("tier", &self.tier)
            .field("concurrency", &self.concurrency.is_some())
            .field("adaptive", &(self.adaptive_at != NO_SLOT))
            .field("fleet", &self.fleet.is_some())
            .finish()
    }
}

impl<P: EngineRef> RequestHold<P> {
    /// Enters the in-flight count of `tier` and takes over the admission's permits (held
    /// here or in the engine's shared store). (By reference, and inlined: the admission is
    /// not copied on the way in.)
    #[inline]
    pub(crate) fn admit<Q: EngineRef>(
        engine: P,
        tier: Tier,
        admission: &mut Admission<'_, Q>,
    ) -> Self {
        let mut hold = Self::waiting(engine, tier, admission);
        hold.engine.engine().in_flight.enter(tier);
        hold.entered = true;
        hold
    }

    /// Takes over the admission's permits for a request that waits for adaptive_concurrency's
    /// room: it enters the in-flight count once [`granted`](Self::granted).
    /// (Always inlined: out of line, the middleware paid for a call and the admission's copy.)
    #[inline(always)]
    pub(crate) fn waiting<Q: EngineRef>(
        engine: P,
        tier: Tier,
        admission: &mut Admission<'_, Q>,
    ) -> Self {
        // Every field named: a permit added to `Admission` must say here whether the hold
        // keeps it (else it would go back with the admission, silently).
        let Admission {
            outcome: _,
            held,
            rate: _,
            failures: _,
            concurrency,
            fleet,
            adaptive,
            queued: _,
        } = admission;
        let concurrency = concurrency.take().and_then(|p| p.keep());
        let fleet = fleet.take().and_then(|p| p.keep());
        let adaptive_at = adaptive.take().map_or(NO_SLOT, |p| slot_at(p.keep()));
        Self {
            engine,
            concurrency_key: concurrency.map_or(0, |(_, key)| key),
            adaptive_at,
            held: *held,
            concurrency: concurrency.map(|(table, _)| table),
            fleet,
            tier,
            class: RouteClass::other(tier),
            entered: false,
        }
    }

    /// Whether it holds an adaptive_concurrency slot (its latency is learned from).
    #[inline]
    pub(crate) fn learns_latency(&self) -> bool {
        self.adaptive_at != NO_SLOT
    }

    /// The route the request was answered on (`route` of its tier), whose service time its
    /// latency teaches.
    #[inline]
    pub(crate) fn set_route(&mut self, route: RouteClass) {
        self.class = route.in_tier(self.tier);
    }

    /// The waiting request was given an adaptive-concurrency slot at `admitted_at`: it is let
    /// through now.
    pub(crate) fn granted(&mut self, admitted_at: Duration) {
        self.engine.engine().in_flight.enter(self.tier);
        self.entered = true;
        self.adaptive_at = slot_at(admitted_at);
    }
}

impl<P: EngineRef> RequestHold<P> {
    /// Gives everything back for a request still running past its deadline, and counts it.
    /// Its time so far is not a service time (brownout stopped waiting for it): its
    /// adaptive_concurrency slot goes back without a latency.
    pub(crate) fn expire(mut self) {
        let engine = self.engine.engine();
        engine.metrics.expired(self.tier);
        if leave_adaptive(&mut self.adaptive_at).is_some() {
            engine.adaptive.release(self.tier, None, engine.clock.now());
        }
    }
}

impl<P: EngineRef> Drop for RequestHold<P> {
    fn drop(&mut self) {
        let engine = self.engine.engine();
        if self.entered {
            engine.in_flight.leave(self.tier);
        }
        if let Some(table) = self.concurrency {
            engine.keyed.release(self.held, table, self.concurrency_key);
        }
        if let Some(table) = self.fleet {
            engine.keyed.release(self.held, table, 0);
        }
        if let Some(admitted_at) = leave_adaptive(&mut self.adaptive_at) {
            let now = engine.clock.now();
            // In whole ns, then µs (no `Duration` arithmetic on every request).
            let latency_us = crate::clock::nanos(now).saturating_sub(admitted_at) / 1_000;
            engine.adaptive.release(self.class, Some(latency_us), now);
        }
    }
}
