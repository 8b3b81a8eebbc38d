//! One request's answer from the shared store: Redis answers what the request asks in one
//! round trip ([`RedisStore::answer_detached`]), and the reply becomes the same [`Answer`] the
//! in-memory store gives, which the limiter chain decides on. What the chain gives back (a
//! later limiter refused the request) goes to Redis through the store's undo queue; only what
//! the script wrote is given back.

use super::{RedisStore, SharedAnswer};
use crate::store::{Answer, Ask, Held, Keyed, StoreError, Unanswered};
use std::sync::Arc;

impl SharedAnswer {
    /// The reply as an answer to `ask`, on `keyed`, whose shared store gave it: what the
    /// script wrote is held as this request's member.
    pub(crate) fn answer<'k>(self, keyed: &'k Keyed, ask: &Ask) -> Answer<'k> {
        let reply = self.reply;
        Answer::shared(
            keyed,
            ask,
            Held::shared(self.member),
            (&reply.replies, &reply.groups),
            (reply.now, reply.written),
        )
    }
}

impl RedisStore {
    /// Asks Redis what `ask` needs, in one round trip. The call runs to its end in a task of
    /// its own: if the caller goes away meanwhile (its future is dropped), what the script
    /// took is given back rather than held until the TTL. `Err`: decide locally.
    pub(crate) async fn answer_detached(
        self: &Arc<Self>,
        ask: Ask,
    ) -> Result<SharedAnswer, Unanswered> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let caller = self.clone();
        tokio::spawn(async move {
            let answer = caller.answer(&ask).await;
            if let Err(Ok(answer)) = tx.send(answer) {
                caller.give_back(&ask, &answer.reply, answer.member);
            }
        });
        match rx.await {
            Ok(answer) => answer,
            Err(_) => Err(Unanswered::failed(StoreError::Failed(
                "the call's task failed".into(),
            ))),
        }
    }
}
