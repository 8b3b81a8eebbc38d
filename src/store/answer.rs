//! A store's answer to what one request asked ([`ClientAsk`]): the second of the three steps
//! every request's per-key limiters go through (plan, answer, decide; docs/ARCHITECTURE.md).
//! The in-memory store (and an app's own, and `local_first`'s hybrid) answers at once
//! ([`Answer::here`]), Redis in one round trip ([`Keyed::answer_shared`](super::Keyed)); the
//! limiter chain then decides on the answer the same way whichever store gave it.
//!
//! An answer holds the permit and the fleet slot it took until the decision takes them
//! over: whatever the decision does not take (it stopped earlier, or panicked) is given back
//! when the answer is dropped.

use super::ask::{ClientAsk, MAX_BUCKETS, MAX_QUOTAS};
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
    pub(crate) fn quota(&self, i: usize) -> Option<&WindowCheck> {
        self.quotas.get(i)
    }

    /// Whether the charges stand (a later refusal gives them back).
    pub(crate) fn written(&self) -> bool {
        self.written
    }

    /// Whether a bucket or quota refused.
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

/// One request's answer from the keyed store.
pub(crate) struct Answer<'k> {
    keyed: &'k Keyed,
    ask: &'k ClientAsk,
    /// Where what it took is held (here, or in the shared store as a member).
    held: Held,
    rate: Option<Result<RateAnswer, StoreError>>,
    in_flight: Option<Result<bool, StoreError>>,
    fleet: Option<Result<bool, StoreError>>,
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
            .field("in_flight", &self.in_flight)
            .field("fleet", &self.fleet)
            .finish()
    }
}

fn unasked(what: &str) -> StoreError {
    StoreError::Failed(format!("the store was not asked for {what}"))
}

impl<'k> Answer<'k> {
    /// `keyed`'s own store answers `ask` at once, as of `now` µs (monotonic) and `unix` µs
    /// since the epoch, in the order and with the rules of the shared store's script
    /// (`store/redis/decide.lua`): buckets then quotas, stopping at a refusal with nothing
    /// charged; then the permit, then the fleet slot; an enforced refusal gives back what was
    /// taken before it. An error answers that part with the error (its limiter fails open)
    /// and goes on. `part` says which part is being answered (a panic is its limiter's).
    pub(crate) fn here(
        keyed: &'k Keyed,
        ask: &'k ClientAsk,
        (now, unix): (u64, u64),
        part: &mut Option<Part>,
    ) -> Self {
        let store = keyed.local();
        let mut answer = Self {
            keyed,
            ask,
            held: Held::LOCAL,
            rate: None,
            in_flight: None,
            fleet: None,
            in_flight_held: false,
            fleet_held: false,
        };
        if ask.asks_rate() {
            *part = Some(Part::Rate);
            let rate = rate_here(store, ask, now, unix);
            let stop = ask.rate_enforced && rate.as_ref().is_ok_and(RateAnswer::refused);
            answer.rate = Some(rate);
            if stop {
                return answer;
            }
        }
        if let Some((key, max)) = ask.in_flight {
            *part = Some(Part::InFlight);
            let taken = store.concurrency_acquire(key, max);
            answer.in_flight_held = taken == Ok(true);
            let stop = ask.in_flight_enforced && taken == Ok(false);
            answer.in_flight = Some(taken);
            if stop {
                answer.give_back_rate_here(unix);
                return answer;
            }
        }
        if let Some(limit) = ask.fleet {
            *part = Some(Part::Fleet);
            let taken = store.fleet_acquire(limit);
            answer.fleet_held = taken == Ok(true);
            let stop = ask.fleet_enforced && taken == Ok(false);
            answer.fleet = Some(taken);
            if stop {
                answer.give_back_rate_here(unix);
                if std::mem::take(&mut answer.in_flight_held) {
                    keyed.release(Held::LOCAL, ask.in_flight.map(|(key, _)| key), false);
                }
            }
        }
        answer
    }

    /// A shared store's answer: `rate`, the permit and the fleet slot (each `(answer,
    /// taken)`), held as `held`.
    #[cfg(feature = "redis")]
    pub(crate) fn shared(
        keyed: &'k Keyed,
        ask: &'k ClientAsk,
        held: Held,
        rate: RateAnswer,
        in_flight: (Option<bool>, bool),
        fleet: (Option<bool>, bool),
    ) -> Self {
        Self {
            keyed,
            ask,
            held,
            rate: ask.asks_rate().then_some(Ok(rate)),
            in_flight: in_flight.0.map(Ok),
            fleet: fleet.0.map(Ok),
            in_flight_held: in_flight.1,
            fleet_held: fleet.1,
        }
    }

    /// What was asked.
    pub(crate) fn ask(&self) -> &'k ClientAsk {
        self.ask
    }

    /// Where what the request took is held.
    pub(crate) fn held(&self) -> Held {
        self.held
    }

    /// request_rate's answer.
    pub(crate) fn rate(&self) -> Result<&RateAnswer, StoreError> {
        match &self.rate {
            Some(Ok(rate)) => Ok(rate),
            Some(Err(e)) => Err(e.clone()),
            None => Err(unasked("request_rate")),
        }
    }

    /// concurrent_requests' answer, and whether the permit is taken over from the answer
    /// (the decision then owns it).
    pub(crate) fn take_permit(&mut self) -> Result<(bool, bool), StoreError> {
        let taken = std::mem::take(&mut self.in_flight_held);
        match &self.in_flight {
            Some(Ok(room)) => Ok((*room, taken)),
            Some(Err(e)) => Err(e.clone()),
            None => Err(unasked("a concurrency permit")),
        }
    }

    /// fleet_usage's answer, and whether the slot is taken over from the answer.
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
    fn give_back_rate_here(&mut self, unix: u64) {
        if let Some(Ok(rate)) = &mut self.rate {
            if std::mem::take(&mut rate.written) {
                undo_rate(self.keyed.local(), self.ask, rate, unix);
            }
        }
    }
}

impl Drop for Answer<'_> {
    /// Gives back the permit and the fleet slot the decision did not take over.
    fn drop(&mut self) {
        if self.in_flight_held || self.fleet_held {
            let key = self
                .ask
                .in_flight
                .filter(|_| self.in_flight_held)
                .map(|(key, _)| key);
            self.keyed.release(self.held, key, self.fleet_held);
        }
    }
}

/// request_rate's buckets and quotas answered by `store`; a refusal or an error gives back
/// what was charged before it.
fn rate_here(
    store: &dyn Store,
    ask: &ClientAsk,
    now: u64,
    unix: u64,
) -> Result<RateAnswer, StoreError> {
    let mut rate = RateAnswer::default();
    for b in &ask.buckets {
        match store.rate_charge(b.key, now, b.increment, b.tolerance) {
            Ok(charge) => {
                rate.buckets.push(charge);
                if let Charge::Denied { .. } = charge {
                    undo_rate(store, ask, &rate, unix);
                    return Ok(rate);
                }
            }
            Err(e) => {
                undo_rate(store, ask, &rate, unix);
                return Err(e);
            }
        }
    }
    for q in &ask.quotas {
        match store.quota_hit(q.index, q.key, unix, &q.rule, q.count) {
            Ok(check) => {
                rate.quotas.push(check);
                if !check.allowed {
                    undo_rate(store, ask, &rate, unix);
                    return Ok(rate);
                }
            }
            Err(e) => {
                undo_rate(store, ask, &rate, unix);
                return Err(e);
            }
        }
    }
    rate.written = true;
    Ok(rate)
}

/// Gives back what `rate` shows charged: the buckets that allowed the request and the quotas
/// that counted it (in the window of `unix`).
fn undo_rate(store: &dyn Store, ask: &ClientAsk, rate: &RateAnswer, unix: u64) {
    for (b, charge) in ask.buckets.iter().zip(&rate.buckets) {
        if let Charge::Allowed { .. } = charge {
            let _ = store.rate_refund(b.key, b.increment);
        }
    }
    for (q, check) in ask.quotas.iter().zip(&rate.quotas) {
        if q.count && check.allowed {
            let _ = store.quota_refund(q.index, q.key, unix, &q.rule);
        }
    }
}
