//! The Lua scripts and what goes in and out of them: the keys (hash-tagged by client, so that
//! one client's keys share a Cluster slot), the arguments, and the replies decoded into the
//! answers the in-memory store gives ([`Charge`], [`WindowCheck`]).

use crate::math::gcra::Charge;
use crate::math::window::{WindowCheck, WindowRule};
use crate::schema::QuotaAlgorithm;
pub(crate) use crate::store::ask::ClientAsk;
use redis::{Cmd, Script, Value};

/// One request's request_rate, concurrent_requests and fleet_usage in one atomic step.
pub(super) const DECIDE: &str = include_str!("decide.lua");
/// Refunds, releases and failure counts.
pub(super) const UNDO: &str = include_str!("undo.lua");

/// The scripts, hashed once.
pub(super) struct Scripts {
    pub(super) decide: Script,
    pub(super) undo: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            decide: Script::new(DECIDE),
            undo: Script::new(UNDO),
        }
    }

    /// Every script with its source, for `SCRIPT LOAD`.
    pub(super) fn all(&self) -> [(&Script, &'static str); 2] {
        [(&self.decide, DECIDE), (&self.undo, UNDO)]
    }
}

/// The script's answer, on the Redis server's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientReply {
    /// The server's time of the decision (µs since the Unix epoch).
    pub now: u64,
    /// A bucket or quota refused.
    pub rate_refused: bool,
    /// Whether the rate charges were written (every bucket and quota passed, and no enforced
    /// refusal stopped the script): only then is there anything to refund.
    pub rate_written: bool,
    /// The permit: room for it, or none; `None` if not asked (or not reached).
    pub in_flight: Option<bool>,
    /// Whether the permit was taken (written).
    pub in_flight_written: bool,
    /// The fleet slot, likewise.
    pub fleet: Option<bool>,
    /// Whether the fleet slot was taken.
    pub fleet_written: bool,
    /// Per bucket asked, its answer if it was evaluated (evaluation stops at a refusal).
    pub buckets: Vec<Option<Charge>>,
    /// Per quota asked, its answer if it was evaluated.
    pub quotas: Vec<Option<WindowCheck>>,
}

/// The names of a client's keys and of the fleet's set.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The prefix of every key.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A bucket: a client's own (`key` is its tag), kept in the client's hash
    /// ([`client`](Self::client)), or an IP's ceiling (under the IP's tag).
    pub fn bucket(&self, tag: u64, key: u64) -> String {
        if own(tag, key) {
            self.client(key)
        } else {
            format!("{}{{{tag:016x}}}:rate:{key:016x}", self.prefix)
        }
    }

    /// A quota's counter.
    pub fn quota(&self, index: usize, key: u64) -> String {
        format!("{}{{{key:016x}}}:quota:{index}", self.prefix)
    }

    /// A client's hash: its own bucket's TAT (field `t`) and its permits in flight (a field
    /// each, valued when it was taken).
    pub fn client(&self, key: u64) -> String {
        format!("{}{{{key:016x}}}:client", self.prefix)
    }

    /// The fleet's set of non-critical requests in flight.
    pub fn fleet(&self) -> String {
        format!("{}{{fleet}}:in_flight", self.prefix)
    }
}

/// Whether the bucket of `tag` and `key` is its client's own (kept in the client's hash).
fn own(tag: u64, key: u64) -> bool {
    tag == key
}

fn flag(b: bool) -> &'static str {
    if b {
        "1"
    } else {
        "0"
    }
}

fn sliding(rule: &WindowRule) -> bool {
    rule.algorithm == QuotaAlgorithm::SlidingWindow
}

/// `EVALSHA` of the decide script for `ask`, taking permits as `member`; `at_us` 0 is the
/// server's clock.
pub(super) fn decide_cmd(
    script: &Script,
    keys: &Keys,
    ask: &ClientAsk,
    member: &str,
    ttl_us: u64,
    at_us: u64,
) -> Cmd {
    let n = ask.buckets.len()
        + ask.quotas.len()
        + usize::from(ask.in_flight.is_some())
        + usize::from(ask.fleet.is_some());
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(n);
    for b in &ask.buckets {
        cmd.arg(keys.bucket(b.tag, b.key));
    }
    for q in &ask.quotas {
        cmd.arg(keys.quota(q.index, q.key));
    }
    if let Some(permit) = ask.in_flight {
        cmd.arg(keys.client(permit.key));
    }
    if ask.fleet.is_some() {
        cmd.arg(keys.fleet());
    }
    cmd.arg(ask.buckets.len())
        .arg(ask.quotas.len())
        .arg(flag(ask.in_flight.is_some()))
        .arg(flag(ask.rate_enforced))
        .arg(flag(ask.in_flight_enforced))
        .arg(at_us)
        .arg(flag(ask.fleet.is_some()))
        .arg(flag(ask.fleet_enforced))
        .arg(member)
        .arg(ttl_us);
    for b in &ask.buckets {
        cmd.arg(b.increment)
            .arg(b.tolerance)
            .arg(flag(own(b.tag, b.key)));
    }
    for q in &ask.quotas {
        cmd.arg(flag(sliding(&q.rule)))
            .arg(q.rule.limit)
            .arg(q.rule.window)
            .arg(flag(q.count));
    }
    if let Some(permit) = ask.in_flight {
        cmd.arg(permit.max);
    }
    if let Some(slot) = ask.fleet {
        cmd.arg(slot.max);
    }
    cmd
}

/// Where a slot given back lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SlotSet {
    /// A client's permits (its hash).
    Client(u64),
    /// The fleet's.
    Fleet,
}

/// Something given back or counted after the decision: what the in-memory store does in
/// `rate_refund`, `quota_refund`, `quota_hit` (failures) and the releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    /// A bucket's charge.
    Bucket {
        /// Its hash tag.
        tag: u64,
        /// The key hash.
        key: u64,
        /// µs to take back.
        increment: u64,
    },
    /// A counted request of a quota's current window.
    Quota {
        /// Quota index.
        index: usize,
        /// The key hash.
        key: u64,
        /// Its window (µs).
        window: u64,
    },
    /// A failed response, counted against a failure quota.
    Failure {
        /// Quota index.
        index: usize,
        /// The key hash.
        key: u64,
        /// Its rule.
        rule: WindowRule,
    },
    /// A permit or fleet slot.
    Release {
        /// Which set.
        set: SlotSet,
        /// The member that holds it.
        member: u64,
    },
}

/// A permit's member name: unique to this process and request.
pub(super) fn member(instance: u64, n: u64) -> String {
    format!("{instance:016x}:{n:x}")
}

/// `EVALSHA` of the undo script over `undos`.
pub(super) fn undo_cmd(script: &Script, keys: &Keys, instance: u64, undos: &[Undo]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(undos.len());
    for u in undos {
        cmd.arg(match *u {
            Undo::Bucket { tag, key, .. } => keys.bucket(tag, key),
            Undo::Quota { index, key, .. } | Undo::Failure { index, key, .. } => {
                keys.quota(index, key)
            }
            Undo::Release {
                set: SlotSet::Client(key),
                ..
            } => keys.client(key),
            Undo::Release {
                set: SlotSet::Fleet,
                ..
            } => keys.fleet(),
        });
    }
    for u in undos {
        match *u {
            Undo::Bucket {
                tag,
                key,
                increment,
            } => cmd
                .arg(if own(tag, key) { "h" } else { "b" })
                .arg(increment),
            Undo::Quota { window, .. } => cmd.arg("q").arg(window),
            Undo::Failure { rule, .. } => cmd
                .arg("f")
                .arg(flag(sliding(&rule)))
                .arg(rule.limit)
                .arg(rule.window),
            Undo::Release {
                set: SlotSet::Client(_),
                member: m,
            } => cmd.arg("p").arg(member(instance, m)),
            Undo::Release {
                set: SlotSet::Fleet,
                member: m,
            } => cmd.arg("z").arg(member(instance, m)),
        };
    }
    cmd
}

/// Why a reply could not be read.
pub(super) fn malformed(what: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Parse,
        "brownout: unexpected script reply",
        what.to_owned(),
    ))
}

fn int(v: &Value) -> Result<i64, redis::RedisError> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(malformed(&format!("{other:?}"))),
    }
}

/// Decodes the decide script's reply to `ask`.
pub(super) fn decide_reply(ask: &ClientAsk, v: &Value) -> Result<ClientReply, redis::RedisError> {
    let Value::Array(items) = v else {
        return Err(malformed(&format!("{v:?}")));
    };
    let want = 5 + 3 * ask.buckets.len() + 4 * ask.quotas.len();
    if items.len() != want {
        return Err(malformed(&format!(
            "{} values, {want} expected",
            items.len()
        )));
    }
    let n = items.iter().map(int).collect::<Result<Vec<i64>, _>>()?;
    let u = |i: usize| u64::try_from(n[i]).unwrap_or(0);
    let state = |i: usize| match n[i] {
        1 => Some(true),
        0 => Some(false),
        _ => None,
    };
    let mut buckets = Vec::with_capacity(ask.buckets.len());
    let mut at = 5;
    for _ in &ask.buckets {
        buckets.push(match n[at] {
            1 => Some(Charge::Allowed { tat: u(at + 1) }),
            0 => Some(Charge::Denied {
                tat: u(at + 1),
                wait: u(at + 2),
            }),
            _ => None,
        });
        at += 3;
    }
    let mut quotas = Vec::with_capacity(ask.quotas.len());
    for _ in &ask.quotas {
        quotas.push((n[at] >= 0).then(|| WindowCheck {
            allowed: n[at] == 1,
            remaining: u32::try_from(u(at + 1)).unwrap_or(u32::MAX),
            reset: u(at + 2),
            retry: u(at + 3),
        }));
        at += 4;
    }
    let (in_flight, fleet, written) = (state(2), state(3), n[4] == 1);
    Ok(ClientReply {
        now: u(0),
        rate_refused: n[1] != 0,
        rate_written: written && n[1] == 0,
        in_flight,
        in_flight_written: written && in_flight == Some(true),
        fleet,
        fleet_written: written && fleet == Some(true),
        buckets,
        quotas,
    })
}
