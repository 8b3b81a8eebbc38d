//! What a request asks of the keyed store (the first step of [`crate::engine`]'s three): an
//! ordered list of per-key operations ([`Op`]: a GCRA bucket, a window counter, a counted
//! slot), grouped by the limiter that asked them ([`Group`]), each group with whether its
//! limiter is enforced. Every store executes the list in its order, whatever limiters made it
//! ([`super::Answer`] here, `decide.lua` in Redis). Plain data of a fixed size (no
//! allocation).

use super::Table;
use crate::math::gcra::BucketCharge;
use crate::math::window::WindowRule;
use arrayvec::ArrayVec;

/// Most quotas one request is checked against (`limiters.request_rate.quotas` lists at most
/// this many).
pub const MAX_QUOTAS: usize = 16;

/// Most operations in one ask: request_rate's two buckets and its quotas, and room for the
/// slots and the buckets of the other limiters.
pub const MAX_OPS: usize = 2 + MAX_QUOTAS + 6;

/// Most groups (limiters with per-key state) in one ask.
pub const MAX_GROUPS: usize = 8;

/// Most limiters that may ask (a limiter's index in the list is below it).
pub const MAX_OWNERS: usize = 16;

/// Most slot operations in one ask (an answer holds the slots it took until the decision
/// takes them over).
pub const MAX_SLOTS: usize = 4;

/// The most one limiter asks of the keyed store for one request (`Limiter::asks_at_most`),
/// or all of them together: the settings are refused when the sum is past what one ask
/// holds, so that a plan never overflows it on the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct AskSize {
    /// Operations.
    pub(crate) ops: usize,
    /// Of which counted slots.
    pub(crate) slots: usize,
    /// Groups (limiters that ask anything).
    pub(crate) groups: usize,
}

impl AskSize {
    /// `self` and `other` in one ask.
    pub(crate) fn plus(self, other: Self) -> Self {
        Self {
            ops: self.ops + other.ops,
            slots: self.slots + other.slots,
            groups: self.groups + other.groups,
        }
    }

    /// What is past an ask's room, in words, if anything.
    pub(crate) fn past_room(&self) -> Option<String> {
        let over = [
            (self.ops, MAX_OPS, "operations"),
            (self.slots, MAX_SLOTS, "counted slots"),
            (self.groups, MAX_GROUPS, "limiters asking"),
        ];
        let (n, room, what) = over.into_iter().find(|(n, room, _)| n > room)?;
        Some(format!(
            "would make one request ask the keyed store for {n} {what} with the limiters before it, past the {room} one ask holds"
        ))
    }
}

/// One per-key operation, on `key` of `table`. `tag` is the key whose Redis Cluster hash slot
/// it lives in (its client's or its IP's), so that a client's keys live together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A GCRA bucket: charge `charge.increment` µs against `charge.tolerance` µs, in a
    /// state carried first if a bucket of other settings wrote it.
    Gcra {
        /// Its table.
        table: Table,
        /// The key hash.
        key: u64,
        /// The hash tag.
        tag: u64,
        /// The charge, and the bucket's step and stamp.
        charge: BucketCharge,
    },
    /// A window counter: check one request against `rule`, and count it if it fits and
    /// `count`.
    Window {
        /// Its table.
        table: Table,
        /// The key hash (also its hash tag).
        key: u64,
        /// Its window.
        rule: WindowRule,
        /// Whether a request that fits is counted (else only checked).
        count: bool,
    },
    /// A counted slot: take one of `max` of `key` (a pool table has one count, whatever the
    /// key), held until the request ends.
    Slot {
        /// Its table.
        table: Table,
        /// The key hash (also its hash tag; 0 in a pool).
        key: u64,
        /// Most taken at once.
        max: u64,
    },
}

#[cfg(feature = "redis")]
impl Op {
    /// Its table.
    #[inline]
    pub fn table(&self) -> Table {
        match *self {
            Op::Gcra { table, .. } | Op::Window { table, .. } | Op::Slot { table, .. } => table,
        }
    }

    /// Its key.
    #[inline]
    pub fn key(&self) -> u64 {
        match *self {
            Op::Gcra { key, .. } | Op::Window { key, .. } | Op::Slot { key, .. } => key,
        }
    }

    /// The key of the hash slot it lives in.
    #[inline]
    pub fn tag(&self) -> u64 {
        match *self {
            Op::Gcra { tag, .. } => tag,
            Op::Window { key, .. } | Op::Slot { key, .. } => key,
        }
    }
}

/// One limiter's operations in an ask: `ops[start..end]`, evaluated in order; a refusal stops
/// the group with nothing of it kept, and if `enforced` stops the whole ask with nothing kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The limiter that asked (its index in the limiter list).
    pub owner: u8,
    /// Whether its refusal stops the request (else dark mode: it goes on).
    pub enforced: bool,
    /// Its first operation.
    pub start: u8,
    /// One past its last operation.
    pub end: u8,
    /// A word the limiter keeps for its decision (request_rate: the plan and whether the
    /// bucket is the elastic one).
    pub memo: u32,
}

/// What one request asks of the keyed store: its operations, in the order the limiters
/// decide, and their groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    ops: ArrayVec<Op, MAX_OPS>,
    groups: ArrayVec<Group, MAX_GROUPS>,
    /// Per limiter (by index), one past its group's index; 0 if it asked nothing. (A lookup,
    /// not a search: each limiter finds its group as it decides.)
    by_owner: [u8; MAX_OWNERS],
    slots: u8,
}

impl Default for Ask {
    /// Nothing asked. (Written field by field: the lists' room is left as it is, not copied.)
    #[inline]
    fn default() -> Self {
        Self {
            ops: ArrayVec::new_const(),
            groups: ArrayVec::new_const(),
            by_owner: [0; MAX_OWNERS],
            slots: 0,
        }
    }
}

impl Ask {
    /// Opens the group of limiter `owner` (its index in the limiter list): the operations
    /// pushed next are its own. A limiter opens one group at most.
    ///
    /// # Panics
    /// With `owner` at or past `MAX_OWNERS`, or past `MAX_GROUPS` groups.
    #[inline]
    pub fn begin(&mut self, owner: u8, enforced: bool, memo: u32) {
        let at = self.ops.len() as u8;
        self.by_owner[usize::from(owner)] = self.groups.len() as u8 + 1;
        self.groups.push(Group {
            owner,
            enforced,
            start: at,
            end: at,
            memo,
        });
    }

    /// Appends `op` to the open group.
    ///
    /// # Panics
    /// With no group open, past `MAX_OPS` operations or past `MAX_SLOTS` slots (the
    /// settings whose limiters would ask more are refused: `Limiter::asks_at_most`).
    #[inline]
    pub fn push(&mut self, op: Op) {
        if let Op::Slot { .. } = op {
            self.slots += 1;
            assert!(
                usize::from(self.slots) <= MAX_SLOTS,
                "too many slots in one ask"
            );
        }
        self.ops.push(op);
        self.groups.last_mut().expect("a group is open").end = self.ops.len() as u8;
    }

    /// Whether nothing is asked.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Every operation, in order.
    #[inline]
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Every group, in order.
    #[inline]
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The operations of `group`.
    #[inline]
    pub fn ops_of(&self, group: &Group) -> &[Op] {
        &self.ops[usize::from(group.start)..usize::from(group.end)]
    }

    /// The group of limiter `owner`, with its index among the groups, if it asked anything.
    #[inline]
    pub fn group(&self, owner: u8) -> Option<(usize, &Group)> {
        let g = usize::from(*self.by_owner.get(usize::from(owner))?).checked_sub(1)?;
        Some((g, self.groups.get(g)?))
    }
}
