//! adaptive_concurrency's waiting room (`queue`, `max_wait`): a non-critical request that finds no
//! room under the limit may wait a moment for one, instead of being refused at once. A slot given
//! back goes to the oldest request of the highest tier waiting, and no lower-tier request passes
//! one waiting: a request that has to wait goes ahead of the lower tiers' requests waiting, and
//! those that come while it waits wait behind it; when the room is full it takes the place of the
//! newest request of the lowest tier waiting (turned away), and is refused if there is none below
//! it. A wait that runs out takes a last look ([`Wait::last_look`]) before it is refused. Only a
//! refusal holds the lower tiers off for `tier_hold`: a hold for every wait would keep GETs off for
//! a second after each POST that waited a moment and was served, idling workers the POSTs alone
//! cannot fill. A POST may wait longer (`post_max_wait`). So the app is handed work the moment a
//! worker frees, while critical requests (which never wait here) find at most the limit's worth of
//! work ahead of them.
//!
//! Only the middleware waits (`Brownout::check` and fleet-mode decisions cannot); nothing here
//! runs on a request that found room, except one read of the waiting counts.

use super::room::{Waiter, GRANTED, WAITING};
use super::permit::AdaptivePermit;
use super::state::{fits, micros, AdaptiveState};
use super::AdaptiveConcurrencyConfig;
use crate::tier::Tier;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// What a request found: room under the limit now, or a place in the waiting room.
#[derive(Debug)]
pub enum Place<'a> {
    /// Admitted.
    Held(AdaptivePermit<'a>),
    /// Waiting; await it (for at most `max_wait`).
    Waiting(Wait),
}

/// A place in the waiting room: resolves to when the request was given its slot, or to `Err`
/// when a higher tier took its place. Dropping it leaves the room (or gives back a slot given
/// to it and not taken).
#[derive(Debug)]
pub struct Wait {
    state: Arc<AdaptiveState>,
    waiter: Arc<Waiter>,
    done: bool,
}

/// A waiting request was turned away to make room for a higher tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnedAway;

impl Future for Wait {
    type Output = Result<Duration, TurnedAway>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let settled = |this: &mut Self| match this.waiter.state.load(Ordering::Acquire) {
            WAITING => None,
            GRANTED => {
                this.done = true;
                let at = this.waiter.granted_at.load(Ordering::Relaxed);
                Some(Ok(Duration::from_micros(at)))
            }
            _ => {
                this.done = true;
                Some(Err(TurnedAway))
            }
        };
        if let Some(out) = settled(&mut self) {
            return Poll::Ready(out);
        }
        if let Ok(mut waker) = self.waiter.waker.lock() {
            *waker = Some(cx.waker().clone());
        }
        // Settled between the first look and the waker being set: it may not have been woken.
        match settled(&mut self) {
            Some(out) => Poll::Ready(out),
            None => Poll::Pending,
        }
    }
}

impl Wait {
    /// The wait ran out at `now`: let in after all (when: `Some`) if given its slot meanwhile,
    /// or if nothing was refused for `tier_hold` and the whole limit (not its tier's share)
    /// has room for it beside its tier and those above, in flight or waiting. Under overload
    /// something is always refused: there the shares hold.
    pub fn last_look(&mut self, now: Duration) -> Option<Duration> {
        let state = &self.state;
        let tier = self.waiter.tier;
        let mut room = state.room();
        match self.waiter.state.load(Ordering::Acquire) {
            WAITING => {}
            GRANTED => {
                self.done = true;
                let at = self.waiter.granted_at.load(Ordering::Relaxed);
                return Some(Duration::from_micros(at));
            }
            _ => return None,
        }
        // In flight at or above its tier, and waiting above it.
        let ahead: u64 = (state.counts.in_flight[..=tier.index()].iter())
            .chain(&state.counts.waiting[..tier.index()])
            .map(|n| n.load(Ordering::SeqCst))
            .sum();
        let refusing = micros(now) < state.refusing_until.load(Ordering::Relaxed);
        if refusing || !fits(ahead, state.lower_limit()) {
            return None;
        }
        room.tiers[tier.index()].retain(|w| !Arc::ptr_eq(w, &self.waiter));
        state.grant(&self.waiter, now);
        self.done = true;
        Some(now)
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let tier = self.waiter.tier;
        let granted = {
            let mut room = self.state.room();
            match self.waiter.state.load(Ordering::Acquire) {
                WAITING => {
                    let queue = &mut room.tiers[tier.index()];
                    queue.retain(|w| !Arc::ptr_eq(w, &self.waiter));
                    self.state.turn_away(&self.waiter);
                    false
                }
                GRANTED => true,
                _ => false,
            }
        };
        if granted {
            // Given a slot it never took (the wait timed out, or the client left, just then).
            let at = Duration::from_micros(self.waiter.granted_at.load(Ordering::Relaxed));
            self.state.release(tier, None, at);
        }
    }
}

impl AdaptiveState {
    /// A slot for a request of `tier` that found none at once: given now if one freed up, or
    /// a place in the waiting room (turning the lower tiers' requests away); `None` when the
    /// room is full of requests of its tier or higher.
    pub(super) fn wait<'a>(
        self: &'a Arc<Self>,
        c: &AdaptiveConcurrencyConfig,
        tier: Tier,
        now: Duration,
    ) -> Option<Place<'a>> {
        let mut room = self.room();
        // Held off since it looked (a request of a higher tier was refused meanwhile).
        if self.held(tier, micros(now)) {
            return None;
        }
        room.settings = c.clone();
        if !self.waiting_at_or_above(tier) && self.has_room(&room, tier) {
            self.counts.in_flight[tier.index()].fetch_add(1, Ordering::SeqCst);
            return Some(Place::Held(AdaptivePermit::new(self, tier, now)));
        }
        // Whoever has to wait goes ahead of the lower tiers' requests waiting (a freed slot
        // goes to the highest tier first), and takes the place of the newest of the lowest
        // tier when the room is full; with none below it, it is refused.
        if room.len() >= c.queue as usize {
            let turned = (tier.index() + 1..4)
                .rev()
                .find_map(|lower| room.tiers[lower].pop_back())?;
            self.turn_away(&turned);
        }
        let waiter = Arc::new(Waiter {
            tier,
            state: AtomicU8::new(WAITING),
            granted_at: AtomicU64::new(0),
            waker: Mutex::new(None),
        });
        room.tiers[tier.index()].push_back(waiter.clone());
        self.counts.waiting[tier.index()].fetch_add(1, Ordering::SeqCst);
        // The limit held this request back: it binds.
        self.waited.fetch_add(1, Ordering::Relaxed);
        // A slot given back while this one was being queued went unseen by its releaser.
        self.dispatch_in(&mut room, now);
        Some(Place::Waiting(Wait {
            state: self.clone(),
            waiter,
            done: false,
        }))
    }
}

#[cfg(test)]
#[path = "wait_tests.rs"]
mod tests;
