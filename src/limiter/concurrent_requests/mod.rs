//! The concurrent-requests limiter: at most `max_in_flight` requests per key in progress. The
//! permit owns its return: it goes back when it is dropped (a later limiter refused the
//! request), or, once the request is admitted, when the request's hold that kept it is
//! dropped (the response body ended, failed or was dropped because the client went away).

mod settings;

pub use settings::ConcurrentRequestsConfig;

use crate::store::AskSize;
use super::Problem;
use super::{Check, LimiterError, LimiterName, RejectStatus, Rejection};
use crate::store::{Answer, Ask, Held, KeyedHandle, Op, Table, TableKind, TableSpec};

/// Its table: the permits taken per client key.
pub(crate) const PERMITS: Table = LimiterName::ConcurrentRequests.table(0);
use crate::tier::Tier;

/// One of a key's in-flight permits, returned to the store when dropped, unless
/// [`keep`](Self::keep) handed it over to the request's hold first.
pub struct ConcurrencyPermit<'a, S: KeyedHandle> {
    /// Whose store gets the permit back; `None` once it is handed over (or when the store
    /// kept none: a later enforced refusal stopped it).
    owner: Option<&'a S>,
    key: u64,
    /// Where it is held.
    held: Held,
}

impl<S: KeyedHandle> std::fmt::Debug for ConcurrencyPermit<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyPermit")
            .field("key", &self.key)
            .finish()
    }
}

impl<S: KeyedHandle> ConcurrencyPermit<'_, S> {
    /// Hands the permit over to whoever keeps the returned key: it must give the permit back
    /// (`Keyed::release`) when its request is done. The request's hold does, so
    /// that a permit needs no handle of its own on the store while the request runs.
    /// `None`: the store kept no permit.
    pub fn keep(mut self) -> Option<(Table, u64)> {
        self.owner.take().map(|_| (PERMITS, self.key))
    }
}

impl<S: KeyedHandle> Drop for ConcurrencyPermit<'_, S> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner {
            owner.keyed().release(self.held, PERMITS, self.key);
        }
    }
}

/// What a request of client `key` asks of the keyed store for this limiter, as its group of
/// `ask` (`enforced`: its refusal stops the request): one of its `max_in_flight` permits.
pub fn add_to_ask(c: &ConcurrentRequestsConfig, key: u64, enforced: bool, ask: &mut Ask) {
    ask.begin(LimiterName::ConcurrentRequests as u8, enforced, 0);
    ask.push(Op::Slot {
        table: PERMITS,
        key,
        max: u64::from(c.max_in_flight),
    });
}

/// Decides on the store's `answer` for `key`'s permit: the permit (owned by `owner`'s keyed
/// state), or when to retry.
pub fn decide<'a, S: KeyedHandle>(
    c: &ConcurrentRequestsConfig,
    owner: &'a S,
    (ask, answer): (&Ask, &mut Answer<'_>),
    key: u64,
    tier: Tier,
) -> Result<Check<ConcurrencyPermit<'a, S>>, LimiterError> {
    let (room, taken) = answer.take_slot(ask, LimiterName::ConcurrentRequests as u8)?;
    if room {
        return Ok(Check::Allowed(ConcurrencyPermit {
            owner: taken.then_some(owner),
            key,
            held: answer.held(),
        }));
    }
    let rejection = Rejection {
        limiter: LimiterName::ConcurrentRequests,
        tier,
        status: RejectStatus::TooManyRequests,
        retry_after: c.retry_after.get(),
        policy: None,
    };
    Ok(Check::Rejected(rejection, ()))
}

/// concurrent_requests as a [`Limiter`](super::Limiter): its settings are its unit.
impl super::Limiter for ConcurrentRequestsConfig {
    fn asks_at_most(&self) -> AskSize {
        AskSize { ops: 1, slots: 1, groups: 1 }
    }
    fn restart_only(&self, new: &Self) -> Option<&'static str> {
        (self.max_keys != new.max_keys).then_some("limiters.concurrent_requests.max_keys")
    }
    fn keep_sized_at_start(&mut self, own: &Self) {
        self.max_keys = own.max_keys;
    }
    const TABLES: u8 = 1;

    fn tables(&self) -> Vec<TableSpec> {
        vec![TableSpec {
            table: PERMITS,
            kind: TableKind::Slots,
            keys: self.max_keys,
            // A field each in the client's hash in Redis.
            name: "client".into(),
            client: true,
        }]
    }
    const NAME: LimiterName = LimiterName::ConcurrentRequests;

    fn problem(_r: &Rejection, _policy: Option<&str>, wait: &str) -> Problem {
        (
            "Too many concurrent requests",
            format!(
                "You have too many requests in progress. Retry in {wait}, once some have finished."
            ),
        )
    }
}
