//! A store's answer to what one request asked ([`Ask`]): the second of the three steps every
//! request's per-key limiters go through (plan, answer, decide; docs/ARCHITECTURE.md). The
//! in-memory store (and an app's own, and `local_first`'s hybrid) answers at once
//! ([`Answer::answer_here`]), Redis in one round trip ([`Keyed::answer_shared`](super::Keyed));
//! each limiter then decides on its group's replies ([`Answer::replies`],
//! [`Answer::take_slot`]) the same way whichever store gave them.
//!
//! Every store follows the same rules, over whatever operations it is given: the groups in
//! order, each group's operations in order; a refusal stops its group and keeps nothing of
//! it; an enforced refusal stops the ask and gives back what earlier groups kept; an error
//! answers its group with the error (its limiter fails open) and the ask goes on.
//!
//! An answer holds the slots it took until the decision takes them over: whatever the
//! decision does not take (it stopped earlier, or panicked) is given back when the answer is
//! dropped.

use super::ask::{Ask, Op, MAX_GROUPS, MAX_OPS, MAX_SLOTS};
use super::{Held, Keyed, StoreError};
use crate::math::gcra::Charge;
use crate::math::window::WindowCheck;
use arrayvec::ArrayVec;

/// One operation's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// A bucket's charge ([`Op::Gcra`]).
    Charge(Charge),
    /// A window's check ([`Op::Window`]).
    Window(WindowCheck),
    /// Whether a slot was free ([`Op::Slot`]).
    Slot(bool),
}

#[cfg(all(test, feature = "redis"))]
impl Reply {
    /// Whether it refuses the request.
    #[inline]
    pub fn refuses(&self) -> bool {
        match self {
            Reply::Charge(c) => matches!(c, Charge::Denied { .. }),
            Reply::Window(w) => !w.allowed,
            Reply::Slot(free) => !free,
        }
    }
}

/// How one group fared. (Plain and small: an answer is filled on every request; a failure's
/// error is kept apart.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Fate {
    /// Not evaluated: an earlier enforced refusal stopped the ask.
    #[default]
    Unreached,
    /// One of its operations refused: nothing of it is kept.
    Refused,
    /// The store failed: nothing of it is kept, and its limiter fails open.
    Failed,
    /// Every operation passed, and what they wrote stands.
    Kept,
    /// Every operation passed, but what they wrote was given back (an enforced refusal
    /// followed).
    Passed,
}

/// One limiter's replies: its operations and their answers, in its order (`None`: not
/// evaluated, after a refusal).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Replies<'a> {
    ops: &'a [Op],
    replies: &'a [Option<Reply>],
    written: bool,
    memo: u32,
    /// The store's clock when it answered (µs), for a store whose clock is not this
    /// process's (Redis): its TATs are moved to this process's clock when they are read.
    clock: Option<u64>,
}

impl Replies<'_> {
    /// The operations it asked.
    #[inline]
    pub(crate) fn ops(&self) -> &[Op] {
        self.ops
    }

    /// Whether what they wrote stands (every one passed and no enforced refusal followed):
    /// only then is there anything to give back.
    #[inline]
    pub(crate) fn written(&self) -> bool {
        self.written
    }

    /// The word the limiter kept in its group.
    #[inline]
    pub(crate) fn memo(&self) -> u32 {
        self.memo
    }

    /// The charge of its `i`-th operation (a bucket), on this process's clock (`now` here),
    /// if it was evaluated.
    #[inline]
    pub(crate) fn charge(&self, i: usize, now: u64) -> Option<Charge> {
        let Some(Some(Reply::Charge(charge))) = self.replies.get(i) else {
            return None;
        };
        let Some(server_now) = self.clock else {
            return Some(*charge);
        };
        let here = |tat: u64| {
            if tat >= server_now {
                now.saturating_add(tat - server_now)
            } else {
                now.saturating_sub(server_now - tat)
            }
        };
        Some(match *charge {
            Charge::Allowed { tat } => Charge::Allowed { tat: here(tat) },
            Charge::Denied { tat, wait } => Charge::Denied {
                tat: here(tat),
                wait,
            },
        })
    }

    /// The check of its `i`-th operation (a window), if it was evaluated.
    #[inline]
    pub(crate) fn window(&self, i: usize) -> Option<&WindowCheck> {
        match self.replies.get(i) {
            Some(Some(Reply::Window(check))) => Some(check),
            Some(Some(Reply::Charge(_) | Reply::Slot(_)) | None) | None => None,
        }
    }
}

/// One request's answer from the keyed store. Filled in place (it is a few hundred bytes:
/// moving it would cost more than answering).
pub(crate) struct Answer<'k> {
    keyed: &'k Keyed,
    /// Where what it took is held (here, or in the shared store as a member).
    held: Held,
    /// Per operation asked, its reply if it was evaluated.
    replies: ArrayVec<Option<Reply>, MAX_OPS>,
    /// Per group asked, how it fared.
    fates: ArrayVec<Fate, MAX_GROUPS>,
    /// The errors of the groups that failed, by group.
    errors: ArrayVec<(u8, StoreError), MAX_GROUPS>,
    /// The slots taken that the answer still holds (operation, table, key): the decision
    /// takes them over, or they go back when the answer is dropped.
    slots: ArrayVec<(u8, super::Table, u64), MAX_SLOTS>,
    clock: Option<u64>,
}

impl std::fmt::Debug for Answer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("held", &self.held)
            .field("replies", &self.replies)
            .field("fates", &self.fates)
            .field("slots", &self.slots)
            .finish()
    }
}

fn unasked(owner: u8) -> StoreError {
    StoreError::Failed(format!("the store was not asked for limiter {owner}"))
}

impl<'k> Answer<'k> {
    /// An answer from `keyed`'s own store that holds nothing yet
    /// ([`answer_here`](Self::answer_here) fills it).
    #[inline]
    pub(crate) fn new(keyed: &'k Keyed) -> Self {
        Self {
            keyed,
            held: Held::LOCAL,
            replies: ArrayVec::new_const(),
            fates: ArrayVec::new_const(),
            errors: ArrayVec::new_const(),
            slots: ArrayVec::new_const(),
            clock: None,
        }
    }

    /// The keyed state's own store answers `ask` at once, as of `now` µs (monotonic) and
    /// `unix` µs since the epoch, with the rules of every store (the module's). `running`
    /// names the group being answered (a panic is its limiter's).
    pub(crate) fn answer_here(
        &mut self,
        ask: &Ask,
        (now, unix): (u64, u64),
        running: &mut Option<u8>,
    ) {
        let store = self.keyed.local();
        for (g, group) in ask.groups().iter().enumerate() {
            *running = Some(group.owner);
            let ops = ask.ops_of(group);
            let (first, slots) = (self.replies.len(), self.slots.len());
            let mut fate = Fate::Kept;
            for op in ops {
                let at = self.replies.len();
                // Each kind answered in its own arm: no reply is built for an error, and a
                // slot taken is held at once.
                let refused = match op {
                    Op::Gcra {
                        table, key, charge, ..
                    } => match store.gcra(*table, *key, now, *charge) {
                        Ok(charge) => {
                            self.replies.push(Some(Reply::Charge(charge)));
                            matches!(charge, Charge::Denied { .. })
                        }
                        Err(e) => self.failed(g, e),
                    },
                    Op::Window {
                        table,
                        key,
                        rule,
                        count,
                    } => match store.window(*table, *key, unix, rule, *count) {
                        Ok(check) => {
                            self.replies.push(Some(Reply::Window(check)));
                            !check.allowed
                        }
                        Err(e) => self.failed(g, e),
                    },
                    Op::Slot { table, key, max } => match store.slot_take(*table, *key, *max) {
                        Ok(free) => {
                            self.replies.push(Some(Reply::Slot(free)));
                            if free {
                                self.slots.push((at as u8, *table, *key));
                            }
                            !free
                        }
                        Err(e) => self.failed(g, e),
                    },
                };
                if refused {
                    fate = if self.replies[at].is_some() {
                        Fate::Refused
                    } else {
                        Fate::Failed
                    };
                    break;
                }
            }
            if fate != Fate::Kept {
                // Nothing of the group is kept: what it took goes back at once.
                give_back_here(self.keyed, ops, &self.replies[first..], unix);
                self.slots.truncate(slots);
                // Its operations after the one that stopped it are not evaluated.
                let end = usize::from(group.end);
                while self.replies.len() < end {
                    self.replies.push(None);
                }
            }
            self.fates.push(fate);
            if fate == Fate::Refused && group.enforced {
                self.give_back_kept_here(ask, unix);
                return;
            }
        }
    }

    /// Group `g` failed with `error`: its operation has no reply. (Always `true`: the group
    /// stops.)
    #[cold]
    fn failed(&mut self, g: usize, error: StoreError) -> bool {
        self.replies.push(None);
        self.errors.push((g as u8, error));
        true
    }

    /// A shared store's answer to `ask`, as it `replies` per operation and `passed` per
    /// group (`None`: not reached), on its clock `now`; `written`: the store kept what
    /// passed (no enforced refusal stopped it). What it took is held as `held`.
    #[cfg(feature = "redis")]
    pub(crate) fn shared(
        keyed: &'k Keyed,
        ask: &Ask,
        held: Held,
        (replies, passed): (&[Option<Reply>], &[Option<bool>]),
        (now, written): (u64, bool),
    ) -> Self {
        let mut answer = Self::new(keyed);
        answer.held = held;
        answer.clock = Some(now);
        answer
            .replies
            .extend((0..ask.ops().len()).map(|i| replies.get(i).copied().flatten()));
        for (g, group) in ask.groups().iter().enumerate() {
            let fate = match passed.get(g).copied().flatten() {
                None => Fate::Unreached,
                Some(false) => Fate::Refused,
                Some(true) if written => Fate::Kept,
                Some(true) => Fate::Passed,
            };
            if fate == Fate::Kept {
                for i in usize::from(group.start)..usize::from(group.end) {
                    if let (Op::Slot { table, key, .. }, Some(Reply::Slot(true))) =
                        (ask.ops()[i], answer.replies[i])
                    {
                        answer.slots.push((i as u8, table, key));
                    }
                }
            }
            answer.fates.push(fate);
        }
        answer
    }

    /// Where what the request took is held.
    #[inline]
    pub(crate) fn held(&self) -> Held {
        self.held
    }

    /// The replies to limiter `owner`'s operations in `ask` (what this answers).
    #[inline]
    pub(crate) fn replies<'a>(
        &'a self,
        ask: &'a Ask,
        owner: u8,
    ) -> Result<Replies<'a>, StoreError> {
        let (g, group) = ask.group(owner).ok_or_else(|| unasked(owner))?;
        let written = self.fate(g, owner)?;
        let range = usize::from(group.start)..usize::from(group.end);
        Ok(Replies {
            ops: &ask.ops()[range.clone()],
            replies: &self.replies[range],
            written,
            memo: group.memo,
            clock: self.clock,
        })
    }

    /// Whether group `g` (of limiter `owner`) was answered, and if so whether what it wrote
    /// stands; its error if it failed.
    #[inline]
    fn fate(&self, g: usize, owner: u8) -> Result<bool, StoreError> {
        match self.fates.get(g) {
            Some(Fate::Kept) => Ok(true),
            Some(Fate::Refused | Fate::Passed) => Ok(false),
            Some(Fate::Failed) => Err(self
                .errors
                .iter()
                .find(|(at, _)| usize::from(*at) == g)
                .map_or_else(|| unasked(owner), |(_, e)| e.clone())),
            None | Some(Fate::Unreached) => Err(unasked(owner)),
        }
    }

    /// Limiter `owner`'s slot (the first of its operations that is one): whether it was
    /// free, and whether it is taken over from the answer (the decision then owns it and
    /// gives it back when its request ends).
    #[inline]
    pub(crate) fn take_slot(&mut self, ask: &Ask, owner: u8) -> Result<(bool, bool), StoreError> {
        let (g, group) = ask.group(owner).ok_or_else(|| unasked(owner))?;
        self.fate(g, owner)?;
        let range = usize::from(group.start)..usize::from(group.end);
        let at = range
            .clone()
            .find(|&i| matches!(ask.ops()[i], Op::Slot { .. }))
            .ok_or_else(|| unasked(owner))?;
        let Some(Reply::Slot(free)) = self.replies[at] else {
            return Err(unasked(owner));
        };
        let Some(held) = self.slots.iter().position(|&(i, ..)| usize::from(i) == at) else {
            return Ok((free, false));
        };
        // Taken over: out of the list, the last one moved into its place.
        if let Some(last) = self.slots.pop() {
            if let Some(place) = self.slots.get_mut(held) {
                *place = last;
            }
        }
        Ok((free, true))
    }

    /// Gives back what the local store kept for the groups before an enforced refusal:
    /// their charges no longer stand, and their slots go back.
    fn give_back_kept_here(&mut self, ask: &Ask, unix: u64) {
        for (group, fate) in ask.groups().iter().zip(self.fates.iter_mut()) {
            if *fate == Fate::Kept {
                *fate = Fate::Passed;
                let range = usize::from(group.start)..usize::from(group.end);
                give_back_here(
                    self.keyed,
                    &ask.ops()[range.clone()],
                    &self.replies[range],
                    unix,
                );
            }
        }
        // Their slots went back with them.
        self.slots.clear();
    }
}

impl Drop for Answer<'_> {
    /// Gives back the slots the decision did not take over.
    #[inline]
    fn drop(&mut self) {
        for &(_, table, key) in &self.slots {
            self.keyed.release(self.held, table, key);
        }
    }
}

/// Whether `reply` shows that `op` wrote something a give-back must undo: a bucket that
/// allowed the request, a window that counted it, a slot taken. (The one rule every store's
/// give-back follows.)
#[inline]
pub(crate) fn wrote(op: &Op, reply: Option<Reply>) -> bool {
    // One arm per kind of operation: a new kind must say what it writes.
    match op {
        Op::Gcra { .. } => matches!(reply, Some(Reply::Charge(Charge::Allowed { .. }))),
        Op::Window { count, .. } => {
            *count && matches!(reply, Some(Reply::Window(check)) if check.allowed)
        }
        Op::Slot { .. } => matches!(reply, Some(Reply::Slot(true))),
    }
}

/// Gives back in `keyed`'s own store what `replies` show `ops` wrote there (windows as of
/// `unix`).
fn give_back_here(keyed: &Keyed, ops: &[Op], replies: &[Option<Reply>], unix: u64) {
    for (op, reply) in ops.iter().zip(replies) {
        if wrote(op, *reply) {
            keyed.refund(Held::LOCAL, op, unix);
        }
    }
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
