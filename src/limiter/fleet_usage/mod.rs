//! The fleet-usage load shedder: `reserved_for_critical` of `capacity` is kept for critical
//! requests. Non-critical requests in flight may use at most `(1 - reserved) × capacity`
//! slots; critical requests are never counted or refused here, so they can use everything.

mod settings;

pub use settings::FleetUsageConfig;

use crate::store::AskSize;
use super::Problem;
use super::{Check, LimiterError, LimiterName, RejectStatus, Rejection};
use crate::store::{Answer, Ask, Held, KeyedHandle, Op, Table, TableKind, TableSpec};

/// Its table: the pool of non-critical slots (one count, whatever the key).
pub(crate) const SLOTS: Table = LimiterName::FleetUsage.table(0);
use crate::tier::Tier;

/// A non-critical request's fleet slot, returned to the store when dropped, unless
/// [`keep`](Self::keep) handed it over to the request's hold first.
pub struct FleetPermit<'a, S: KeyedHandle> {
    /// Whose store gets the slot back; `None` once it is handed over (or when the store
    /// kept none).
    owner: Option<&'a S>,
    /// Where it is held.
    held: Held,
}

impl<S: KeyedHandle> std::fmt::Debug for FleetPermit<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetPermit")
    }
}

impl<S: KeyedHandle> FleetPermit<'_, S> {
    /// Hands the slot over to its keeper, which must give it back (`Keyed::release`) when
    /// the request is done: the request's hold does. `None`: the store kept no slot; else
    /// its table.
    pub fn keep(mut self) -> Option<Table> {
        self.owner.take().map(|_| SLOTS)
    }
}

impl<S: KeyedHandle> Drop for FleetPermit<'_, S> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner {
            owner.keyed().release(self.held, SLOTS, 0);
        }
    }
}

/// What a non-critical request asks of the keyed store for this limiter, as its group of
/// `ask` (`enforced`: its refusal stops the request): one slot of the pool, under
/// `(1 - reserved) × capacity`. (Critical requests are never counted: they ask nothing.)
pub fn add_to_ask(c: &FleetUsageConfig, enforced: bool, ask: &mut Ask) {
    ask.begin(LimiterName::FleetUsage as u8, enforced, 0);
    ask.push(Op::Slot {
        table: SLOTS,
        key: 0,
        max: c.non_critical_limit(),
    });
}

/// Decides on the store's `answer` for a non-critical request's slot (`None` for a critical
/// one, which takes none): the slot (owned by `owner`'s keyed state), or when to retry.
pub fn decide<'a, S: KeyedHandle>(
    c: &FleetUsageConfig,
    owner: &'a S,
    (ask, answer): (&Ask, &mut Answer<'_>),
    tier: Tier,
) -> Result<Check<Option<FleetPermit<'a, S>>>, LimiterError> {
    if tier == Tier::Critical {
        return Ok(Check::Allowed(None));
    }
    let (room, taken) = answer.take_slot(ask, LimiterName::FleetUsage as u8)?;
    if room {
        return Ok(Check::Allowed(Some(FleetPermit {
            owner: taken.then_some(owner),
            held: answer.held(),
        })));
    }
    let rejection = Rejection {
        limiter: LimiterName::FleetUsage,
        tier,
        status: RejectStatus::ServiceUnavailable,
        retry_after: c.retry_after.get(),
        policy: None,
    };
    Ok(Check::Rejected(rejection, ()))
}

/// fleet_usage as a [`Limiter`](super::Limiter): its settings are its unit.
impl super::Limiter for FleetUsageConfig {
    fn asks_at_most(&self) -> AskSize {
        AskSize { ops: 1, slots: 1, groups: 1 }
    }
    const NAME: LimiterName = LimiterName::FleetUsage;
    const TABLES: u8 = 1;
    const TRACKS_KEYS: bool = false;

    fn restart_only(&self, _new: &Self) -> Option<&'static str> {
        None // one slot count, whatever the capacity
    }

    fn keep_sized_at_start(&mut self, _own: &Self) {}

    fn tables(&self) -> Vec<TableSpec> {
        vec![TableSpec {
            table: SLOTS,
            kind: TableKind::Pool,
            keys: 1,
            // One sorted set for the fleet, a member per slot.
            name: "{fleet}:in_flight".into(),
            client: false,
        }]
    }

    fn problem(r: &Rejection, _policy: Option<&str>, wait: &str) -> Problem {
        (
            "Capacity reserved",
            format!(
                "The remaining capacity is reserved for critical requests. Retry this {} request in {wait}.",
                r.tier
            ),
        )
    }
}
