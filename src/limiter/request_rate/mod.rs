//! The request-rate limiter: a per-key bucket of credits (weighted endpoint costs, plans, soft
//! and elastic throttling) plus optional window quotas. What a request asks of the keyed
//! store is written here ([`RateRules::add_to_ask`]), and the store's answer decided on here
//! ([`RateRules::decide`]), whichever store gave it.

mod decide;
mod rules;
mod settings;
mod validate;

pub use rules::{Quota, RateRules};
pub use settings::{
    Excess, PerIp, PerIpConfig, PlanConfig, QuotaConfig, QuotaCount, QuotaKey, RequestRateConfig,
    AUTO_PER_IP_CLIENTS,
};

use crate::store::AskSize;
use super::Problem;
use super::{LimiterName, RatePolicy, Rejection, Request};
use crate::math::gcra::BucketCharge;
use crate::schema::QuotaAlgorithm;
use crate::store::{Ask, Held, Keyed, Op, Store};
use crate::store::{Table, TableKind, TableSpec, MAX_QUOTAS};

/// Its table of buckets: each client's own and the per-IP ceilings.
pub(crate) const BUCKETS: Table = LimiterName::RequestRate.table(0);

/// The window table of quota `index` (one per quota, after the buckets').
pub(crate) const fn quota_table(index: usize) -> Table {
    LimiterName::RequestRate.table(1 + index as u8)
}

/// Most quotas reported in one `RateLimit` field.
const REPORTED_QUOTAS: usize = 4;

/// What the limiter saw, for the `RateLimit` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateStatus {
    /// Index of the plan used.
    pub plan: u16,
    /// Whether the elastic bucket was used.
    pub elastic: bool,
    /// The bucket's TAT and the time of the check (µs); what the header reports is computed
    /// from them only when the header is written.
    pub tat: u64,
    /// The per-IP ceiling's TAT (µs), when it was checked.
    pub ip_tat: u64,
    /// When the request was checked (µs).
    pub at: u64,
    /// (quota index, requests left, seconds to reset) of the quotas evaluated.
    quotas: [(u8, u16, u32); REPORTED_QUOTAS],
    reported: u8,
}

impl RateStatus {
    /// (quota index, requests left, seconds to reset) of the quotas evaluated (at most four).
    pub fn quotas(&self) -> &[(u8, u16, u32)] {
        &self.quotas[..usize::from(self.reported)]
    }

    /// The same status with the bucket's TAT at `tat`.
    pub fn with_tat(mut self, tat: u64) -> Self {
        self.tat = tat;
        self
    }
}

/// What the limiter took, to give back if a later limiter rejects the request, and the
/// failure-counting quotas to charge if the app answers with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateTicket {
    key: u64,
    ip: u64,
    increment: u64,
    ip_increment: u64,
    counted: u16,
    /// Quotas (bit per index) that count this request if it fails.
    pub failures: u16,
}

/// What counts an admitted request against its failure quotas if the app answers it with an
/// error: its client, its IP and those quotas (bit per index). Kept apart from the
/// [`RateTicket`]: it waits for the response, beside the response future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureTicket {
    key: u64,
    ip: u64,
    quotas: u16,
}

impl RateTicket {
    /// What counts the request against its failure quotas, if any would count it.
    pub fn failure_ticket(&self) -> Option<FailureTicket> {
        (self.failures != 0).then_some(FailureTicket {
            key: self.key,
            ip: self.ip,
            quotas: self.failures,
        })
    }
}

/// The time of a check in µs: monotonic for buckets, Unix time for quota windows, which
/// follow the calendar (a `1d` window starts at UTC midnight on every server, whenever it
/// started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CheckTime {
    /// The monotonic clock.
    pub mono: u64,
    /// Microseconds since the Unix epoch.
    pub unix: u64,
}

/// What an admitted request took from the limiter, and what the limiter saw. (A rejected one
/// took nothing; its answer carries the [`RateStatus`] for the `RateLimit` fields.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateAdmit {
    /// For the `RateLimit` field.
    pub status: RateStatus,
    /// The bucket's TAT if what was taken is given back.
    pub refunded: u64,
    /// What was taken.
    pub ticket: RateTicket,
    /// µs the request is held for its turn (`excess: delay`; 0: it goes on at once).
    pub pace: u64,
}

/// The buckets one request is charged in, and the plan of its own.
struct Charges {
    plan: usize,
    bucket: Charged,
    ceiling: Option<Charged>,
}

/// A bucket charge: on `key`, in the hash slot of `tag`.
#[derive(Clone, Copy)]
struct Charged {
    key: u64,
    tag: u64,
    charge: BucketCharge,
}

impl Charged {
    /// As the keyed store is asked it.
    #[inline]
    fn op(self) -> Op {
        Op::Gcra {
            table: BUCKETS,
            key: self.key,
            tag: self.tag,
            charge: self.charge,
        }
    }
}

/// The word request_rate keeps in its group: the plan and whether the bucket is elastic.
fn memo(plan: usize, elastic: bool) -> u32 {
    (plan as u32 & 0xffff) | (u32::from(elastic) << 16)
}

/// The plan and elasticity a [`memo`] keeps.
fn unmemo(memo: u32) -> (u16, bool) {
    ((memo & 0xffff) as u16, memo >> 16 != 0)
}

/// The increment of a bucket operation.
fn increment(op: &Op) -> u64 {
    match op {
        Op::Gcra { charge, .. } => charge.increment,
        Op::Window { .. } | Op::Slot { .. } => 0,
    }
}

/// Whole seconds in `us` microseconds, rounded up.
pub fn secs_up(us: u64) -> u32 {
    u32::try_from(us.div_ceil(1_000_000)).unwrap_or(u32::MAX)
}

/// `n` as a `u32`, saturating.
pub fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The key of an IP's ceiling bucket: kept apart from the IP's own client bucket (a client
/// without an API key is keyed by its IP too, and must not be charged twice in one bucket).
fn ceiling_key(ip: u64) -> u64 {
    crate::rng::mix(ip ^ 0x7065_725f_6970_0000) // "per_ip"
}

impl RateRules {
    /// The buckets a request is charged in: its plan's (widened while `elastic`) and the
    /// per-IP ceiling, if any. (Always inlined: out of line, its two callers paid about 40
    /// instructions a request for the call and the copy of its answer.)
    #[inline(always)]
    fn charges(&self, req: &Request<'_>, elastic: bool) -> Charges {
        let plan = self.plan(req.plan);
        let bucket = self.bucket(plan, elastic);
        let cost = self.cost(plan, req.method, req.path);
        let ceiling = self.per_ip.as_ref().map(|ceiling| Charged {
            key: ceiling_key(req.ip),
            tag: req.ip,
            // An expensive route costs at most the whole ceiling, so it can always pass.
            charge: ceiling.charging(cost.min(ceiling.burst as u32)),
        });
        Charges {
            plan,
            bucket: Charged {
                key: req.key,
                tag: req.key,
                charge: bucket.charging(cost),
            },
            ceiling,
        }
    }

    /// The quotas that apply to a request, with their index and the key they count against.
    fn applying<'s>(
        &'s self,
        req: &'s Request<'_>,
    ) -> impl Iterator<Item = (usize, &'s Quota, u64)> + 's {
        self.quotas
            .iter()
            .enumerate()
            .filter(|(_, q)| q.applies(req.method, req.path))
            .map(|(i, q)| {
                let key = match q.key {
                    QuotaKey::Client => req.key,
                    QuotaKey::Ip => req.ip,
                };
                (i, q, key)
            })
    }

    /// What a request asks of the keyed store for this limiter (`elastic`: the server has
    /// room to spare), as its group of `ask` (`enforced`: its refusal stops the request):
    /// the buckets (ceiling first), then the quotas that apply, each a window in its own
    /// table; the group keeps the plan the bucket is of.
    pub fn add_to_ask(&self, req: &Request<'_>, elastic: bool, enforced: bool, ask: &mut Ask) {
        let Charges {
            plan,
            bucket,
            ceiling,
        } = self.charges(req, elastic);
        ask.begin(LimiterName::RequestRate as u8, enforced, memo(plan, elastic));
        if let Some(ceiling) = ceiling {
            ask.push(ceiling.op());
        }
        ask.push(bucket.op());
        for (index, q, key) in self.applying(req) {
            ask.push(Op::Window {
                table: quota_table(index),
                key,
                rule: q.rule,
                count: q.count == QuotaCount::Requests,
            });
        }
    }

    /// The failure quotas `ticket` is counted against if its response fails, as the
    /// windows to count it in.
    pub(crate) fn failure_quotas<'s>(
        &'s self,
        ticket: &'s FailureTicket,
    ) -> impl Iterator<Item = Op> + 's {
        self.quotas
            .iter()
            .enumerate()
            .filter(|(i, _)| ticket.quotas & (1 << i) != 0)
            .map(|(i, q)| Op::Window {
                table: quota_table(i),
                key: quota_key(q, (ticket.key, ticket.ip)),
                rule: q.rule,
                count: true,
            })
    }

    /// Gives back what `ticket` took, held as `held` in `keyed` (a later limiter rejected
    /// the request).
    pub fn refund(&self, keyed: &Keyed, held: Held, ticket: &RateTicket, at: CheckTime) {
        let bucket = |key: u64, tag: u64, increment: u64| Op::Gcra {
            table: BUCKETS,
            key,
            tag,
            charge: BucketCharge {
                increment,
                ..BucketCharge::default()
            },
        };
        if ticket.increment > 0 {
            let own = bucket(ticket.key, ticket.key, ticket.increment);
            keyed.refund(held, &own, at.unix);
        }
        if ticket.ip_increment > 0 {
            let ceiling = bucket(ceiling_key(ticket.ip), ticket.ip, ticket.ip_increment);
            keyed.refund(held, &ceiling, at.unix);
        }
        for (i, quota) in self.quotas.iter().enumerate() {
            if ticket.counted & (1 << i) != 0 {
                let window = Op::Window {
                    table: quota_table(i),
                    key: quota_key(quota, (ticket.key, ticket.ip)),
                    rule: quota.rule,
                    count: true,
                };
                keyed.refund(held, &window, at.unix);
            }
        }
    }

    /// Counts a failed response against the failure quotas the request matched; `unix_now`
    /// in µs since the Unix epoch.
    pub fn record_failure(&self, store: &dyn Store, ticket: &FailureTicket, unix_now: u64) {
        for op in self.failure_quotas(ticket) {
            if let Op::Window {
                table, key, rule, ..
            } = op
            {
                let _ = store.window(table, key, unix_now, &rule, true);
            }
        }
    }

    /// Credits left of the nominal burst and seconds until the bucket is full, as of the check.
    pub fn bucket_reading(&self, status: &RateStatus) -> (u32, u32) {
        let bucket = self.bucket(usize::from(status.plan), status.elastic);
        (
            saturate(bucket.remaining(status.tat, status.at)),
            secs_up(status.tat.saturating_sub(status.at)),
        )
    }
}

/// The key `quota` counts a request of client `key` from `ip` under.
fn quota_key(quota: &Quota, (key, ip): (u64, u64)) -> u64 {
    match quota.key {
        QuotaKey::Client => key,
        QuotaKey::Ip => ip,
    }
}

/// request_rate as a [`Limiter`](super::Limiter): its settings are its unit.
impl super::Limiter for RequestRateConfig {
    fn asks_at_most(&self) -> AskSize {
        // The per-IP ceiling, the bucket and a window or log per quota.
        let ops = 2 + self.quotas.len();
        AskSize { ops, slots: 0, groups: 1 }
    }
    fn restart_only(&self, new: &Self) -> Option<&'static str> {
        // Its tables are sized at start: max_keys entries, one table per quota.
        if self.max_keys != new.max_keys {
            return Some("limiters.request_rate.max_keys");
        }
        // A sliding log keeps another kind of table than a counter.
        let logs = |q: &[QuotaConfig]| q.iter().map(|q| q.algorithm == QuotaAlgorithm::SlidingLog).collect::<Vec<_>>();
        (self.quotas.len() != new.quotas.len() || logs(&self.quotas) != logs(&new.quotas))
            .then_some("limiters.request_rate.quotas")
    }
    // The number of quotas cannot be kept apart: a fleet document with another number of
    // quotas is refused.
    fn keep_sized_at_start(&mut self, own: &Self) {
        self.max_keys = own.max_keys;
    }
    const TABLES: u8 = 1 + MAX_QUOTAS as u8;

    fn tables(&self) -> Vec<TableSpec> {
        // A client's own bucket lives in its hash in Redis (with its permits); a per-IP
        // ceiling under `{ip}:rate:{key}`; a quota's window under `{key}:quota:{index}`.
        let bucket = TableSpec {
            table: BUCKETS,
            kind: TableKind::Gcra,
            keys: self.max_keys,
            name: "rate".into(),
            client: true,
        };
        let quotas = self.quotas.iter().enumerate().map(|(i, q)| TableSpec {
            table: quota_table(i),
            kind: match q.algorithm {
                QuotaAlgorithm::FixedWindow | QuotaAlgorithm::SlidingWindow => TableKind::Window,
                QuotaAlgorithm::SlidingLog => TableKind::Log,
            },
            keys: self.max_keys,
            name: format!("quota:{i}").into(),
            client: false,
        });
        std::iter::once(bucket).chain(quotas).collect()
    }
    const NAME: LimiterName = LimiterName::RequestRate;

    fn problem(r: &Rejection, policy: Option<&str>, wait: &str) -> Problem {
        match policy {
            Some("per_ip") if r.policy == Some(RatePolicy::PerIp) => (
                "Too many requests",
                format!("Too many requests come from your network address. Retry in {wait}."),
            ),
            Some(name) => (
                "Quota exceeded",
                format!("You have reached the limit of the {name} quota. Retry in {wait}."),
            ),
            None => (
                "Too many requests",
                format!("You have used up your request credits. Retry in {wait}, or spread your requests out."),
            ),
        }
    }
}

#[cfg(test)]
mod tests;
