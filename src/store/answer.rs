//! A store's answer to what one request asked ([`ClientAsk`]): the second of the three steps
//! every request's per-key limiters go through (plan, answer, decide; docs/ARCHITECTURE.md).
//! The in-memory store (and an app's own, and `local_first`'s hybrid) answers at once
//! ([`Answer::answer_here`]), Redis in one round trip ([`Keyed::answer_shared`](super::Keyed)); the
//! limiter chain then decides on the answer the same way whichever store gave it.
//!
//! An answer holds the permit and the fleet slot it took until the decision takes them
//! over: whatever the decision does not take (it stopped earlier, or panicked) is given back
//! when the answer is dropped.

use super::ask::{ClientAsk, SlotsAsk, MAX_BUCKETS, MAX_QUOTAS};
use super::{Held, Keyed, Store, StoreError};
use crate::math::gcra::Charge;
use crate::math::window::WindowCheck;
use arrayvec::ArrayVec;

/// The part of an ask being answered: a panic there is its limiter's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The buckets and quotas (request_rate).
    Rate,
    /// The permit (concurrent_requests).
    InFlight,
    /// The fleet slot (fleet_usage).
    Fleet,
}

/// The answer for request_rate's buckets and quotas, in the ask's order; evaluation stops at
/// the first refusal, so a list may be shorter than what was asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RateAnswer {
    buckets: ArrayVec<Charge, MAX_BUCKETS>,
    quotas: ArrayVec<WindowCheck, MAX_QUOTAS>,
    /// Whether the charges stand: every bucket and quota passed and no enforced refusal
    /// followed. Only then is there anything to give back.
    written: bool,
    /// The store's clock when it answered (µs), for a store whose clock is not this
    /// process's (Redis): its TATs are moved to this process's clock when they are read.
    clock: Option<u64>,
}

impl RateAnswer {
    /// The charge of the `i`-th bucket asked, on this process's clock (`now` here), if it was
    /// evaluated.
    #[inline]
    pub(crate) fn charge(&self, i: usize, now: u64) -> Option<Charge> {
        let charge = *self.buckets.get(i)?;
        let Some(server_now) = self.clock else {
            return Some(charge);
        };
        let here = |tat: u64| {
            if tat >= server_now {
                now.saturating_add(tat - server_now)
            } else {
                now.saturating_sub(server_now - tat)
            }
        };
        Some(match charge {
            Charge::Allowed { tat } => Charge::Allowed { tat: here(tat) },
            Charge::Denied { tat, wait } => Charge::Denied {
                tat: here(tat),
                wait,
            },
        })
    }

    /// The check of the `i`-th quota asked, if it was evaluated.
    #[inline]
    pub(crate) fn quota(&self, i: usize) -> Option<&WindowCheck> {
        self.quotas.get(i)
    }

    /// Whether the charges stand (a later refusal gives them back).
    #[inline]
    pub(crate) fn written(&self) -> bool {
        self.written
    }

    /// Whether a bucket or quota refused.
    #[inline]
    fn refused(&self) -> bool {
        matches!(self.buckets.last(), Some(Charge::Denied { .. }))
            || self.quotas.last().is_some_and(|q| !q.allowed)
    }

    /// An answer decoded from a shared store's reply (`None`: not evaluated), on its clock
    /// `now`.
    #[cfg(feature = "redis")]
    pub(crate) fn shared(
        buckets: &[Option<Charge>],
        quotas: &[Option<WindowCheck>],
        written: bool,
        now: u64,
    ) -> Self {
        Self {
            buckets: buckets.iter().map_while(|c| *c).take(MAX_BUCKETS).collect(),
            quotas: quotas.iter().map_while(|q| *q).take(MAX_QUOTAS).collect(),
            written,
            clock: Some(now),
        }
    }
}

/// One request's answer from the keyed store. Filled in place (it is a few hundred bytes:
/// moving it would cost more than answering).
pub(crate) struct Answer<'k> {
    keyed: &'k Keyed,
    /// Where what it took is held (here, or in the shared store as a member).
    held: Held,
    /// request_rate's part: asked, and answered (`rate_failed`: the store's error instead).
    rate_asked: bool,
    rate: RateAnswer,
    rate_failed: Option<StoreError>,
    in_flight: Option<Result<bool, StoreError>>,
    fleet: Option<Result<bool, StoreError>>,
    /// The permit and the fleet slot asked for (what is given back).
    permit: Option<SlotsAsk>,
    fleet_slot: Option<SlotsAsk>,
    /// The permit, while the answer still holds it (the decision takes it over).
    in_flight_held: bool,
    /// The fleet slot, likewise.
    fleet_held: bool,
}

impl std::fmt::Debug for Answer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("held", &self.held)
            .field("rate", &self.rate)
            .field("rate_failed", &self.rate_failed)
            .field("in_flight", &self.in_flight)
            .field("fleet", &self.fleet)
            .finish()
    }
}

fn unasked(what: &str) -> StoreError {
    StoreError::Failed(format!("the store was not asked for {what}"))
}

impl<'k> Answer<'k> {
    /// An answer from `keyed`'s own store that holds nothing yet
    /// ([`answer_here`](Self::answer_here) fills it).
    #[inline]
    pub(crate) fn new(keyed: &'k Keyed) -> Self {
        Self {
            keyed,
            held: Held::LOCAL,
            rate_asked: false,
            rate: RateAnswer::default(),
            rate_failed: None,
            in_flight: None,
            fleet: None,
            permit: None,
            fleet_slot: None,
            in_flight_held: false,
            fleet_held: false,
        }
    }

    /// The keyed state's own store answers `ask` at once, as of `now` µs (monotonic) and
    /// `unix` µs since the epoch, in the order and with the rules of the shared store's
    /// script (`store/redis/decide.lua`): buckets then quotas, stopping at a refusal with
    /// nothing charged; then the permit, then the fleet slot; an enforced refusal gives back
    /// what was taken before it. An error answers that part with the error (its limiter fails
    /// open) and goes on. `part` says which part is being answered (a panic is its limiter's).
    pub(crate) fn answer_here(
        &mut self,
        ask: &ClientAsk,
        (now, unix): (u64, u64),
        part: &mut Option<Part>,
    ) {
        let keyed = self.keyed;
        let store = keyed.local();
        if ask.asks_rate() {
            *part = Some(Part::Rate);
            self.rate_asked = true;
            match rate_here(store, ask, &mut self.rate, (now, unix)) {
                Ok(()) if ask.rate_enforced && self.rate.refused() => return,
                Ok(()) => {}
                Err(e) => self.rate_failed = Some(e),
            }
        }
        if let Some(permit) = ask.in_flight {
            *part = Some(Part::InFlight);
            self.permit = Some(permit);
            let taken = store.slot_take(permit.table, permit.key, permit.max);
            self.in_flight_held = matches!(taken, Ok(true));
            let stop = ask.in_flight_enforced && matches!(taken, Ok(false));
            self.in_flight = Some(taken);
            if stop {
                self.give_back_rate_here(ask, unix);
                return;
            }
        }
        if let Some(slot) = ask.fleet {
            *part = Some(Part::Fleet);
            self.fleet_slot = Some(slot);
            let taken = store.slot_take(slot.table, slot.key, slot.max);
            self.fleet_held = matches!(taken, Ok(true));
            let stop = ask.fleet_enforced && matches!(taken, Ok(false));
            self.fleet = Some(taken);
            if stop {
                self.give_back_rate_here(ask, unix);
                if std::mem::take(&mut self.in_flight_held) {
                    let permit = self.permit.map(|p| (p.table, p.key));
                    keyed.release(Held::LOCAL, permit, None);
                }
            }
        }
    }

    /// A shared store's answer to `ask`: `rate`, the permit and the fleet slot (each
    /// `(answer, taken)`), held as `held`.
    #[cfg(feature = "redis")]
    pub(crate) fn shared(
        keyed: &'k Keyed,
        ask: &ClientAsk,
        held: Held,
        rate: RateAnswer,
        in_flight: (Option<bool>, bool),
        fleet: (Option<bool>, bool),
    ) -> Self {
        Self {
            keyed,
            held,
            rate_asked: ask.asks_rate(),
            rate,
            rate_failed: None,
            in_flight: in_flight.0.map(Ok),
            fleet: fleet.0.map(Ok),
            permit: ask.in_flight,
            fleet_slot: ask.fleet,
            in_flight_held: in_flight.1,
            fleet_held: fleet.1,
        }
    }

    /// Where what the request took is held.
    #[inline]
    pub(crate) fn held(&self) -> Held {
        self.held
    }

    /// request_rate's answer.
    #[inline]
    pub(crate) fn rate(&self) -> Result<&RateAnswer, StoreError> {
        match &self.rate_failed {
            _ if !self.rate_asked => Err(unasked("request_rate")),
            Some(e) => Err(e.clone()),
            None => Ok(&self.rate),
        }
    }

    /// concurrent_requests' answer, and whether the permit is taken over from the answer
    /// (the decision then owns it).
    #[inline]
    pub(crate) fn take_permit(&mut self) -> Result<(bool, bool), StoreError> {
        let taken = std::mem::take(&mut self.in_flight_held);
        match &self.in_flight {
            Some(Ok(room)) => Ok((*room, taken)),
            Some(Err(e)) => Err(e.clone()),
            None => Err(unasked("a concurrency permit")),
        }
    }

    /// fleet_usage's answer, and whether the slot is taken over from the answer.
    #[inline]
    pub(crate) fn take_fleet_slot(&mut self) -> Result<(bool, bool), StoreError> {
        let taken = std::mem::take(&mut self.fleet_held);
        match &self.fleet {
            Some(Ok(room)) => Ok((*room, taken)),
            Some(Err(e)) => Err(e.clone()),
            None => Err(unasked("a fleet slot")),
        }
    }

    /// Gives back what the local store charged for request_rate (an enforced refusal
    /// followed): the charges no longer stand.
    fn give_back_rate_here(&mut self, ask: &ClientAsk, unix: u64) {
        // (`written` is set only when every bucket and quota answered and passed.)
        if std::mem::take(&mut self.rate.written) {
            undo_rate(self.keyed.local(), ask, &self.rate, unix);
        }
    }
}

impl Drop for Answer<'_> {
    /// Gives back the permit and the fleet slot the decision did not take over.
    #[inline]
    fn drop(&mut self) {
        if self.in_flight_held || self.fleet_held {
            let permit = (self.permit)
                .filter(|_| self.in_flight_held)
                .map(|p| (p.table, p.key));
            let fleet = (self.fleet_slot)
                .filter(|_| self.fleet_held)
                .map(|f| f.table);
            self.keyed.release(self.held, permit, fleet);
        }
    }
}

/// request_rate's buckets and quotas answered by `store`, into `rate` (empty); a refusal or
/// an error gives back what was charged before it.
fn rate_here(
    store: &dyn Store,
    ask: &ClientAsk,
    rate: &mut RateAnswer,
    (now, unix): (u64, u64),
) -> Result<(), StoreError> {
    for b in &ask.buckets {
        match store.gcra(b.table, b.key, now, b.increment, b.tolerance) {
            Ok(charge) => {
                rate.buckets.push(charge);
                if let Charge::Denied { .. } = charge {
                    undo_rate(store, ask, rate, unix);
                    return Ok(());
                }
            }
            Err(e) => {
                undo_rate(store, ask, rate, unix);
                return Err(e);
            }
        }
    }
    for q in &ask.quotas {
        match store.window(q.table, q.key, unix, &q.rule, q.count) {
            Ok(check) => {
                rate.quotas.push(check);
                if !check.allowed {
                    undo_rate(store, ask, rate, unix);
                    return Ok(());
                }
            }
            Err(e) => {
                undo_rate(store, ask, rate, unix);
                return Err(e);
            }
        }
    }
    rate.written = true;
    Ok(())
}

/// Gives back what `rate` shows charged: the buckets that allowed the request and the quotas
/// that counted it (in the window of `unix`).
fn undo_rate(store: &dyn Store, ask: &ClientAsk, rate: &RateAnswer, unix: u64) {
    for (b, charge) in ask.buckets.iter().zip(&rate.buckets) {
        if let Charge::Allowed { .. } = charge {
            let _ = store.gcra_refund(b.table, b.key, b.increment);
        }
    }
    for (q, check) in ask.quotas.iter().zip(&rate.quotas) {
        if q.count && check.allowed {
            let _ = store.window_refund(q.table, q.key, unix, &q.rule);
        }
    }
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
