//! adaptive_concurrency's waiting room (`queue`, `max_wait`): a non-critical request that
//! finds no room under the limit may wait a moment for one, instead of being refused at once.
//! A slot given back goes to the oldest request of the highest tier waiting (POST before GET
//! before test), and no lower-tier request passes one waiting: a request that has to wait
//! turns away the lower tiers' requests waiting, and those that come while it waits wait
//! behind it. Only a refusal (at once, or when a wait runs out or is turned away) holds the
//! lower tiers off for `tier_hold`: a hold for every wait would keep GETs off for a second
//! after each POST that waited a moment and was served, idling workers the POSTs alone cannot
//! fill. A POST may wait longer (`post_max_wait`) than the others (`max_wait`). So the app is
//! handed work the moment a worker frees, while what waits inside it stays short: critical
//! requests (which never wait here) find at most the limit's worth of work ahead of them.
//!
//! Only the middleware waits (`Brownout::check` and fleet-mode decisions cannot); nothing here
//! runs on a request that found room, except one read of the waiting counts.

use super::room::{Waiter, GRANTED, WAITING};
use super::state::{micros, AdaptivePermit, AdaptiveState};
use super::AdaptiveConcurrencyConfig;
use crate::tier::Tier;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// What a request found: a slot now, or a place in the waiting room.
#[derive(Debug)]
pub enum Slot<'a> {
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
    ) -> Option<Slot<'a>> {
        let mut room = self.room();
        // Held off since it looked (a request of a higher tier was refused meanwhile).
        if self.held(tier, micros(now)) {
            return None;
        }
        room.settings = c.clone();
        if !self.waiting_at_or_above(tier) && self.has_room(&room, tier) {
            self.counts.in_flight[tier.index()].fetch_add(1, Ordering::SeqCst);
            return Some(Slot::Held(AdaptivePermit::new(self, tier, now)));
        }
        // Whoever has to wait turns the lower tiers' requests waiting away: none of them is
        // served before it, and the room keeps its places for it and the tiers above.
        for lower in tier.index() + 1..4 {
            while let Some(turned) = room.tiers[lower].pop_back() {
                self.turn_away(&turned);
            }
        }
        if room.len() >= c.queue as usize {
            return None;
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
        self.refused.fetch_add(1, Ordering::Relaxed);
        // A slot given back while this one was being queued went unseen by its releaser.
        self.dispatch_in(&mut room, now);
        Some(Slot::Waiting(Wait {
            state: self.clone(),
            waiter,
            done: false,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::adaptive_concurrency::acquire;
    use crate::limiter::Check;
    use std::task::Waker;

    fn config(queue: u32) -> AdaptiveConcurrencyConfig {
        AdaptiveConcurrencyConfig {
            queue,
            get_share: 1.0,
            test_share: 1.0,
            tier_hold: crate::schema::HumanDuration::from_secs(0),
            ..AdaptiveConcurrencyConfig::default()
        }
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// A slot of `tier` at `at` ms: `Some(Ok(permit))`, `Some(Err(wait))`, `None` if refused.
    fn take<'a>(
        c: &AdaptiveConcurrencyConfig,
        s: &'a Arc<AdaptiveState>,
        tier: Tier,
        at: u64,
    ) -> Option<Result<AdaptivePermit<'a>, Wait>> {
        match acquire(c, s, (tier, 0), ms(at), true).unwrap() {
            Check::Allowed(Slot::Held(p)) => Some(Ok(p)),
            Check::Allowed(Slot::Waiting(w)) => Some(Err(w)),
            Check::Rejected(..) => None,
        }
    }

    fn waits(slot: Option<Result<AdaptivePermit<'_>, Wait>>) -> Wait {
        match slot {
            Some(Err(w)) => w,
            other => panic!("expected to wait, got {other:?}"),
        }
    }

    fn poll(w: &mut Wait) -> Poll<Result<Duration, TurnedAway>> {
        Pin::new(w).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_freed_slot_goes_to_the_highest_tier_waiting_then_the_oldest() {
        let c = config(8);
        let s = Arc::new(AdaptiveState::new(2.0));
        let held: Vec<_> = (0..2)
            .map(|_| take(&c, &s, Tier::Post, 0).unwrap().unwrap().keep())
            .collect();
        let mut post = waits(take(&c, &s, Tier::Post, 1));
        let mut post2 = waits(take(&c, &s, Tier::Post, 2));
        let mut get = waits(take(&c, &s, Tier::Get, 3));
        let mut test = waits(take(&c, &s, Tier::Test, 4));
        assert_eq!((s.waiting(), s.in_flight()), (4, 2));
        assert!(poll(&mut post).is_pending());
        let critical = take(&c, &s, Tier::Critical, 5).unwrap().unwrap();
        assert_eq!(s.in_flight(), 3, "critical passes, counted");
        drop(critical);
        assert!(s.take_window(5).binding, "waiting is the limit binding");

        s.release(Tier::Post, Some(ms(10) - held[0]), ms(10));
        assert_eq!(poll(&mut post), Poll::Ready(Ok(ms(10))), "post first");
        assert!(poll(&mut post2).is_pending() && poll(&mut get).is_pending());
        s.release(Tier::Post, None, ms(11));
        assert_eq!(poll(&mut post2), Poll::Ready(Ok(ms(11))));
        s.release(Tier::Post, None, ms(12));
        assert_eq!(poll(&mut get), Poll::Ready(Ok(ms(12))), "then get");
        assert!(poll(&mut test).is_pending());
        assert_eq!((s.waiting(), s.in_flight()), (1, 2));
        // A newcomer does not pass a waiting request of its tier or a higher one.
        let mut test2 = waits(take(&c, &s, Tier::Test, 13));
        s.release(Tier::Post, None, ms(14));
        assert_eq!(poll(&mut test), Poll::Ready(Ok(ms(14))), "oldest first");
        assert!(poll(&mut test2).is_pending());
        // A grown limit lets it in at the next dispatch.
        s.publish(3.0, [None; 4]);
        s.dispatch(ms(15));
        assert_eq!(poll(&mut test2), Poll::Ready(Ok(ms(15))));
        assert_eq!((s.waiting(), s.in_flight()), (0, 3));
    }

    #[test]
    fn a_request_that_has_to_wait_turns_lower_tiers_away_and_none_passes_it() {
        let c = AdaptiveConcurrencyConfig {
            tier_hold: crate::schema::HumanDuration::from_secs(1),
            ..config(2)
        };
        let s = Arc::new(AdaptiveState::new(1.0));
        let held = take(&c, &s, Tier::Post, 0).unwrap().unwrap();
        let mut test = waits(take(&c, &s, Tier::Test, 1));
        let mut get = waits(take(&c, &s, Tier::Get, 2));
        assert_eq!(poll(&mut test), Poll::Ready(Err(TurnedAway)));
        // Waiting holds nothing off: a test request that comes now waits behind the GET.
        let mut test = waits(take(&c, &s, Tier::Test, 3));
        let _post = waits(take(&c, &s, Tier::Post, 4));
        assert_eq!(poll(&mut get), Poll::Ready(Err(TurnedAway)));
        assert_eq!(poll(&mut test), Poll::Ready(Err(TurnedAway)));
        let mut get = waits(take(&c, &s, Tier::Get, 5));
        let _post2 = waits(take(&c, &s, Tier::Post, 6));
        assert_eq!(poll(&mut get), Poll::Ready(Err(TurnedAway)));
        // A POST refused (the room is full of POSTs) holds GETs off until 1.007 s.
        assert!(take(&c, &s, Tier::Post, 7).is_none(), "full of posts");
        assert!(take(&c, &s, Tier::Get, 1006).is_none(), "held off");
        assert!(
            s.wait(&c, Tier::Get, ms(6)).is_none(),
            "one that looked before the hold finds it at the room's door"
        );
        assert!(
            take(&c, &s, Tier::Get, 1007).is_none(),
            "the hold is over, but the room is full of a higher tier"
        );
        assert_eq!((s.waiting(), s.in_flight()), (2, 1));
        drop(held);
        assert_eq!(s.waiting(), 1, "a POST was given the slot");
        let mut get = waits(take(&c, &s, Tier::Get, 1008));
        assert!(poll(&mut get).is_pending(), "behind the POST still waiting");
        assert_eq!(c.max_wait_for(Tier::Post), ms(400));
        assert_eq!(c.max_wait_for(Tier::Get), ms(100));
    }

    #[test]
    fn leaving_the_room_gives_back_what_the_wait_held() {
        let c = config(4);
        let s = Arc::new(AdaptiveState::new(1.0));
        let held = take(&c, &s, Tier::Post, 0).unwrap().unwrap();
        let gone = waits(take(&c, &s, Tier::Get, 1));
        let granted = waits(take(&c, &s, Tier::Post, 2));
        let mut next = waits(take(&c, &s, Tier::Get, 3));
        drop(gone);
        assert_eq!(
            s.waiting(),
            2,
            "a request that left (timed out) no longer waits"
        );
        drop(held);
        assert_eq!(
            (s.waiting(), s.in_flight()),
            (1, 1),
            "the POST got the slot"
        );
        // It leaves before taking it (its wait timed out just then): the slot passes on.
        drop(granted);
        assert_eq!(poll(&mut next), Poll::Ready(Ok(ms(0))));
        assert_eq!((s.waiting(), s.in_flight()), (0, 1));
    }

    #[test]
    fn without_a_queue_or_leave_to_wait_a_request_is_refused_at_once() {
        let s = Arc::new(AdaptiveState::new(1.0));
        let c = config(0);
        let _held = take(&c, &s, Tier::Post, 0).unwrap().unwrap();
        assert!(take(&c, &s, Tier::Post, 1).is_none());
        let c = config(4);
        let refused = acquire(&c, &s, (Tier::Post, 0), ms(2), false).unwrap();
        assert!(matches!(refused, Check::Rejected(..)));
        assert_eq!(s.waiting(), 0);
    }
}
