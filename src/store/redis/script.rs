//! The Lua scripts and what goes in and out of them: the keys (hash-tagged by client, so that
//! one client's keys share a Cluster slot), the arguments, and the replies decoded into the
//! answers the in-memory store gives ([`Reply`]: a [`Charge`], a [`WindowCheck`], a slot).

use crate::math::gcra::Charge;
use crate::math::window::{WindowCheck, WindowRule};
use crate::schema::QuotaAlgorithm;
use crate::store::{Ask, Op, Reply, Table, TableKind, TableSpec};
use redis::{Cmd, Script, Value};

/// One request's operations (whatever limiters asked them) in one atomic step.
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
    /// Whether the script kept what passed (no enforced refusal stopped it).
    pub written: bool,
    /// Per group asked: whether it passed (`Some(false)`: one of its operations refused,
    /// nothing of it kept; `None`: not reached).
    pub groups: Vec<Option<bool>>,
    /// Per operation asked, its reply if it was evaluated (a group stops at a refusal).
    pub replies: Vec<Option<Reply>>,
}

// For the scripts' tests (and `redis-internals` users): what a reply says, read by index.
#[cfg(any(test, feature = "redis-internals"))]
impl ClientReply {
    /// The charge of operation `i`, if it is a bucket's and was evaluated.
    pub fn charge(&self, i: usize) -> Option<Charge> {
        match self.replies.get(i) {
            Some(Some(Reply::Charge(c))) => Some(*c),
            Some(Some(Reply::Window(_) | Reply::Slot(_)) | None) | None => None,
        }
    }

    /// Whether any group refused.
    #[cfg(feature = "redis-internals")]
    pub fn refused(&self) -> bool {
        self.groups.contains(&Some(false))
    }
}

/// How the scripts keep an operation's state, by the letter they read it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Shape {
    /// `h`: a client's own bucket, field `t` of its hash.
    HashBucket,
    /// `b`: a bucket, a key of its own.
    Bucket,
    /// `w`: a window counter.
    Window,
    /// `l`: a sliding log, a sorted set of its events' times.
    Log,
    /// `p`: a client's slot, a field of its hash.
    HashSlot,
    /// `z`: a slot of a pool, a member of one sorted set.
    Pool,
    /// `s`: a key's slot, a member of its own sorted set (which expires with its newest).
    Slots,
}

impl Shape {
    fn letter(self) -> &'static str {
        match self {
            Shape::HashBucket => "h",
            Shape::Bucket => "b",
            Shape::Window => "w",
            Shape::Log => "l",
            Shape::HashSlot => "p",
            Shape::Pool => "z",
            Shape::Slots => "s",
        }
    }
}

/// How a table is kept in Redis.
#[derive(Debug, Clone)]
struct Home {
    kind: TableKind,
    name: String,
    client: bool,
}

/// The names of the keys: each table's, by id, as its limiter named it ([`TableSpec`]).
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
    homes: Vec<Option<Home>>,
}

impl Keys {
    /// Keys under `prefix` for `tables`.
    pub fn new(prefix: &str, tables: &[TableSpec]) -> Self {
        let n = tables.iter().map(|t| t.table.id() + 1).max().unwrap_or(0);
        let mut homes = vec![None; n];
        for t in tables {
            homes[t.table.id()] = Some(Home {
                kind: t.kind,
                name: t.name.to_string(),
                client: t.client,
            });
        }
        Self {
            prefix: prefix.to_owned(),
            homes,
        }
    }

    /// The prefix of every key.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A client's hash: its own bucket's TAT (field `t`) and its slots in flight (a field
    /// each, valued when it was taken).
    pub fn client(&self, key: u64) -> String {
        format!("{}{{{key:016x}}}:client", self.prefix)
    }

    /// Where `table`'s state of `key` (under hash tag `tag`) lives, for an operation of
    /// `kind`, and its shape. A table no limiter listed is named by its id.
    pub(super) fn of(
        &self,
        table: Table,
        (tag, key): (u64, u64),
        kind: TableKind,
    ) -> (String, Shape) {
        let home = self.homes.get(table.id()).and_then(Option::as_ref);
        let client = home.is_some_and(|h| h.client);
        let kind = home.map_or(kind, |h| h.kind);
        let own = || {
            let id;
            let name = match home {
                Some(h) => h.name.as_str(),
                None => {
                    id = format!("t{}", table.id());
                    id.as_str()
                }
            };
            match kind {
                TableKind::Pool => format!("{}{name}", self.prefix),
                TableKind::Gcra | TableKind::Window | TableKind::Log | TableKind::Slots
                    if tag == key =>
                {
                    format!("{}{{{tag:016x}}}:{name}", self.prefix)
                }
                TableKind::Gcra | TableKind::Window | TableKind::Log | TableKind::Slots => {
                    format!("{}{{{tag:016x}}}:{name}:{key:016x}", self.prefix)
                }
            }
        };
        match kind {
            TableKind::Gcra if client && tag == key => (self.client(key), Shape::HashBucket),
            TableKind::Gcra => (own(), Shape::Bucket),
            TableKind::Window => (own(), Shape::Window),
            TableKind::Log => (own(), Shape::Log),
            TableKind::Slots if client => (self.client(key), Shape::HashSlot),
            TableKind::Pool => (own(), Shape::Pool),
            TableKind::Slots => (own(), Shape::Slots),
        }
    }

    /// Where `op`'s state lives, and its shape.
    pub(super) fn of_op(&self, op: &Op) -> (String, Shape) {
        let kind = match op {
            Op::Gcra { .. } => TableKind::Gcra,
            Op::Window { .. } => TableKind::Window,
            Op::Slot { .. } => TableKind::Slots,
        };
        self.of(op.table(), (op.tag(), op.key()), kind)
    }

    /// Where a slot of `key` in `table` lives, and its shape.
    pub(super) fn slot(&self, table: Table, key: u64) -> (String, Shape) {
        self.of(table, (key, key), TableKind::Slots)
    }
}

pub(super) fn flag(b: bool) -> &'static str {
    if b {
        "1"
    } else {
        "0"
    }
}

pub(super) fn sliding(rule: &WindowRule) -> bool {
    rule.algorithm == QuotaAlgorithm::SlidingWindow
}

/// `EVALSHA` of the decide script for `ask`, taking slots as `member`; `at_us` 0 is the
/// server's clock.
pub(super) fn decide_cmd(
    script: &Script,
    keys: &Keys,
    ask: &Ask,
    member: &str,
    ttl_us: u64,
    at_us: u64,
) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(ask.ops().len());
    let shapes: Vec<Shape> = ask
        .ops()
        .iter()
        .map(|op| {
            let (key, shape) = keys.of_op(op);
            cmd.arg(key);
            shape
        })
        .collect();
    cmd.arg(at_us)
        .arg(member)
        .arg(ttl_us)
        .arg(ask.groups().len());
    for g in ask.groups() {
        cmd.arg(flag(g.enforced)).arg(g.end - g.start);
    }
    for (op, shape) in ask.ops().iter().zip(shapes) {
        cmd.arg(shape.letter());
        match *op {
            Op::Gcra { charge, .. } => cmd
                .arg(charge.increment)
                .arg(charge.tolerance)
                .arg(charge.step),
            Op::Window { rule, count, .. } => cmd
                .arg(flag(sliding(&rule)))
                .arg(rule.limit)
                .arg(rule.window)
                .arg(flag(count)),
            Op::Slot { max, .. } => cmd.arg(max),
        };
    }
    cmd
}

/// Where a slot given back lives: `key`'s in `table`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotSet {
    /// Its table.
    pub table: Table,
    /// Its key (0 in a pool).
    pub key: u64,
}

/// A slot's member name: unique to this process and request.
pub(super) fn member(instance: u64, n: u64) -> String {
    format!("{instance:016x}:{n:x}")
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

/// Decodes the decide script's reply to `ask`: the time, whether it wrote, then per group
/// reached its state and per operation its state and, if evaluated, its numbers (a bucket
/// two, a window three, a slot none).
pub(super) fn decide_reply(ask: &Ask, v: &Value) -> Result<ClientReply, redis::RedisError> {
    let Value::Array(items) = v else {
        return Err(malformed(&format!("{v:?}")));
    };
    let n = items.iter().map(int).collect::<Result<Vec<i64>, _>>()?;
    if n.len() < 2 {
        return Err(malformed(&format!("{} values", n.len())));
    }
    let mut rest = &n[2..];
    let total = n.len();
    let next = |rest: &mut &[i64], count: usize| -> Result<(i64, i64, i64), redis::RedisError> {
        if rest.len() < count {
            return Err(malformed(&format!("{total} values, more expected")));
        }
        let (got, left) = rest.split_at(count);
        *rest = left;
        let at = |i: usize| got.get(i).copied().unwrap_or(0);
        Ok((at(0), at(1), at(2)))
    };
    let u = |x: i64| u64::try_from(x).unwrap_or(0);
    let mut groups = Vec::with_capacity(ask.groups().len());
    let mut replies = vec![None; ask.ops().len()];
    for group in ask.groups() {
        if rest.is_empty() {
            // Not reached: an enforced refusal before it stopped the script.
            groups.push(None);
            continue;
        }
        groups.push(Some(next(&mut rest, 1)?.0 == 1));
        let range = usize::from(group.start)..usize::from(group.end);
        for (reply, op) in replies[range.clone()].iter_mut().zip(&ask.ops()[range]) {
            let state = next(&mut rest, 1)?.0;
            if state < 0 {
                continue;
            }
            let passed = state == 1;
            *reply = Some(match op {
                Op::Gcra { .. } => {
                    let x = next(&mut rest, 2)?;
                    if passed {
                        Reply::Charge(Charge::Allowed { tat: u(x.0) })
                    } else {
                        Reply::Charge(Charge::Denied {
                            tat: u(x.0),
                            wait: u(x.1),
                        })
                    }
                }
                Op::Window { .. } => {
                    let x = next(&mut rest, 3)?;
                    Reply::Window(WindowCheck {
                        allowed: passed,
                        remaining: u32::try_from(u(x.0)).unwrap_or(u32::MAX),
                        reset: u(x.1),
                        retry: u(x.2),
                    })
                }
                Op::Slot { .. } => Reply::Slot(passed),
            });
        }
    }
    if !rest.is_empty() {
        return Err(malformed(&format!("{} values left over", rest.len())));
    }
    Ok(ClientReply {
        now: u(n[0]),
        written: n[1] == 1,
        groups,
        replies,
    })
}
