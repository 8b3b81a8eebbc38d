//! One request's decision on the shared store: Redis answers what the request asks in one
//! round trip ([`RedisStore::decide_detached`]), and the limiter chain decides on that answer
//! through the same per-key operations it uses on the in-memory store ([`Answered`]), so
//! request_rate, concurrent_requests and fleet_usage make the same decisions with the same
//! code. What the chain gives back (a later limiter refused the request) goes to Redis through
//! the store's undo queue; only what the script wrote is given back.

use super::script::{ClientAsk, SlotSet, Undo};
use super::{RedisStore, SharedAnswer};
use crate::math::gcra::Charge;
use crate::math::window::{WindowCheck, WindowRule};
use crate::store::{Held, Store, StoreError, Unanswered};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Redis's answer to what one request asked: the chain decides on it with
/// [`decide`](Self::decide), and the request's permits are [`held`](Self::held) as its member.
pub(crate) struct SharedDecision {
    store: Arc<RedisStore>,
    ask: ClientAsk,
    answer: SharedAnswer,
}

impl SharedDecision {
    /// Where the request's permits are held.
    pub(crate) fn held(&self) -> Held {
        Held::shared(self.answer.member)
    }

    /// Runs `decide` (the limiter chain, and what follows from its verdict) over the answer,
    /// then gives back a fleet slot the script took that the chain never reached.
    pub(crate) fn decide<R>(&self, decide: impl FnOnce(&dyn Store) -> R) -> R {
        let answered = Answered::new(&self.store, &self.ask, &self.answer);
        let decided = decide(&answered);
        answered.give_back_unused();
        decided
    }
}

impl RedisStore {
    /// Asks Redis what `ask` needs, in one round trip. The call runs to its end in a task of
    /// its own: if the caller goes away meanwhile (its future is dropped), what the script
    /// took is given back rather than held until the TTL. `Err`: decide locally.
    pub(crate) async fn decide_detached(
        self: &Arc<Self>,
        ask: ClientAsk,
    ) -> Result<SharedDecision, Unanswered> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let caller = self.clone();
        tokio::spawn(async move {
            let answer = caller.decide(&ask).await;
            if let Err((ask, Ok(answer))) = tx.send((ask, answer)) {
                caller.give_back(&ask, &answer.reply, answer.member);
            }
        });
        match rx.await {
            Ok((ask, Ok(answer))) => Ok(SharedDecision {
                store: self.clone(),
                ask,
                answer,
            }),
            Ok((_, Err(failed))) => Err(failed),
            Err(_) => Err(Unanswered::failed(StoreError::Failed(
                "the call's task failed".into(),
            ))),
        }
    }
}

/// One request's shared answers, as the per-key operations the chain asks for.
struct Answered<'r> {
    store: &'r RedisStore,
    ask: &'r ClientAsk,
    answer: &'r SharedAnswer,
    /// Whether the chain took the fleet slot's answer (it stops before fleet_usage when an
    /// earlier limiter refuses the request).
    fleet_used: AtomicBool,
}

impl<'r> Answered<'r> {
    /// `answer`, the shared store's reply to `ask`.
    fn new(store: &'r RedisStore, ask: &'r ClientAsk, answer: &'r SharedAnswer) -> Self {
        Self {
            store,
            ask,
            answer,
            fleet_used: AtomicBool::new(false),
        }
    }

    /// Gives back a fleet slot that was taken but that the chain never reached (it cannot
    /// happen while the chain and the script agree; never leak a slot if they do not).
    fn give_back_unused(&self) {
        if self.answer.reply.fleet_written && !self.fleet_used.load(Ordering::Relaxed) {
            self.store.undo(Undo::Release {
                set: SlotSet::Fleet,
                member: self.answer.member,
            });
        }
    }
}

impl std::fmt::Debug for Answered<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answered")
            .field("answer", &self.answer)
            .finish()
    }
}

fn unasked(what: &str) -> StoreError {
    StoreError::Failed(format!("the shared store was not asked for {what}"))
}

/// `tat` on the server's clock, moved to the caller's (`now` there is `server_now` here).
fn local_tat(tat: u64, now: u64, server_now: u64) -> u64 {
    if tat >= server_now {
        now.saturating_add(tat - server_now)
    } else {
        now.saturating_sub(server_now - tat)
    }
}

impl Store for Answered<'_> {
    fn rate_charge(&self, key: u64, now: u64, _: u64, _: u64) -> Result<Charge, StoreError> {
        let (ask, reply) = (self.ask, &self.answer.reply);
        let i = ask
            .buckets
            .iter()
            .position(|b| b.key == key)
            .ok_or_else(|| unasked("this bucket"))?;
        let charge = reply.buckets.get(i).copied().flatten();
        Ok(match charge.ok_or_else(|| unasked("this bucket"))? {
            Charge::Allowed { tat } => Charge::Allowed {
                tat: local_tat(tat, now, reply.now),
            },
            Charge::Denied { tat, wait } => Charge::Denied {
                tat: local_tat(tat, now, reply.now),
                wait,
            },
        })
    }

    fn rate_refund(&self, key: u64, increment: u64) -> Result<(), StoreError> {
        let tag = self
            .ask
            .buckets
            .iter()
            .find(|b| b.key == key)
            .map(|b| b.tag);
        if let (true, Some(tag)) = (self.answer.reply.rate_written, tag) {
            self.store.undo(Undo::Bucket {
                tag,
                key,
                increment,
            });
        }
        Ok(())
    }

    fn quota_hit(
        &self,
        quota: usize,
        key: u64,
        _: u64,
        _: &WindowRule,
        _: bool,
    ) -> Result<WindowCheck, StoreError> {
        let (ask, reply) = (self.ask, &self.answer.reply);
        let i = ask
            .quotas
            .iter()
            .position(|q| q.index == quota && q.key == key)
            .ok_or_else(|| unasked("this quota"))?;
        reply
            .quotas
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| unasked("this quota"))
    }

    fn quota_refund(
        &self,
        quota: usize,
        key: u64,
        _: u64,
        rule: &WindowRule,
    ) -> Result<(), StoreError> {
        if self.answer.reply.rate_written {
            self.store.undo(Undo::Quota {
                index: quota,
                key,
                window: rule.window,
            });
        }
        Ok(())
    }

    fn concurrency_acquire(&self, _: u64, _: u64) -> Result<bool, StoreError> {
        self.answer
            .reply
            .in_flight
            .ok_or_else(|| unasked("a concurrency permit"))
    }

    fn concurrency_release(&self, key: u64) {
        if self.answer.reply.in_flight_written {
            self.store.undo(Undo::Release {
                set: SlotSet::Client(key),
                member: self.answer.member,
            });
        }
    }

    fn fleet_acquire(&self, _: u64) -> Result<bool, StoreError> {
        self.fleet_used.store(true, Ordering::Relaxed);
        self.answer
            .reply
            .fleet
            .ok_or_else(|| unasked("a fleet slot"))
    }

    fn fleet_release(&self) {
        if self.answer.reply.fleet_written {
            self.store.undo(Undo::Release {
                set: SlotSet::Fleet,
                member: self.answer.member,
            });
        }
    }

    fn evict_idle(&self, _: u64, _: u64, _: &[WindowRule]) {}

    fn tracked_keys(&self) -> (usize, usize) {
        (0, 0)
    }
}
