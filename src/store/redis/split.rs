//! Cluster mode: a script may only touch keys of one slot, so one request's ask is split by
//! the hash tag of each operation's key (the client's keys, the IP's keys, the fleet's set),
//! the parts are sent at once, and their replies are merged into the answer one script would
//! have given. What the parts kept that one script would not have (a group passed in one part
//! while it refused in another) is given back. Every operation goes to exactly one part,
//! whatever limiter asked it.

use super::script::{ClientReply, Keys};
use crate::math::gcra::Charge;
use crate::store::{Ask, Reply};

/// The part of an ask whose keys share one Redis Cluster hash slot: every group of the whole
/// ask (in its order, empty where none of its operations is here), and where its operations
/// sit in the whole ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SlotAsk {
    pub(super) ask: Ask,
    ops: Vec<usize>,
}

/// The hash tag of a Redis key: what is between its first `{` and the next `}` (the whole
/// key when there is none), as Redis Cluster reads it.
fn hash_tag(key: &str) -> &str {
    key.find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.find('}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key)
}

/// `ask` split by the hash tag of each operation's key (`keys` names them): one part per
/// tag, in the order the tags first appear.
pub(super) fn split(keys: &Keys, ask: &Ask) -> Vec<SlotAsk> {
    let mut tags: Vec<String> = Vec::new();
    let part_of: Vec<usize> = ask
        .ops()
        .iter()
        .map(|op| {
            let (key, _) = keys.of_op(op);
            let tag = hash_tag(&key);
            tags.iter().position(|t| t == tag).unwrap_or_else(|| {
                tags.push(tag.to_owned());
                tags.len() - 1
            })
        })
        .collect();
    (0..tags.len())
        .map(|p| {
            let mut part = SlotAsk {
                ask: Ask::default(),
                ops: Vec::new(),
            };
            for group in ask.groups() {
                part.ask.begin(group.owner, group.enforced, group.memo);
                let range = usize::from(group.start)..usize::from(group.end);
                for (i, op) in ask
                    .ops()
                    .iter()
                    .enumerate()
                    .take(range.end)
                    .skip(range.start)
                {
                    if part_of[i] == p {
                        part.ask.push(*op);
                        part.ops.push(i);
                    }
                }
            }
            part
        })
        .collect()
}

/// `t` on the clock of a part that read `from`, moved to one that read `to`.
fn moved(t: u64, from: u64, to: u64) -> u64 {
    (i128::from(t) - i128::from(from) + i128::from(to)).clamp(0, i128::from(u64::MAX)) as u64
}

/// The answer one script would have given to `ask`, from its parts' `replies` (one each, in
/// order), and, per part, which groups to give back of what it kept.
pub(super) fn merge(
    ask: &Ask,
    parts: &[SlotAsk],
    replies: &[ClientReply],
) -> (ClientReply, Vec<Vec<bool>>) {
    let now = replies.first().map_or(0, |r| r.now);
    // A group refused if it refused anywhere; passed if it passed everywhere.
    let mut groups: Vec<Option<bool>> = (0..ask.groups().len())
        .map(|g| {
            let states = replies.iter().map(|r| r.groups.get(g).copied().flatten());
            if states.clone().any(|s| s == Some(false)) {
                Some(false)
            } else if states.into_iter().all(|s| s == Some(true)) {
                Some(true)
            } else {
                None
            }
        })
        .collect();
    // One script stops at the first enforced refusal: the groups after it are not reached.
    let stop =
        (ask.groups().iter().zip(&groups)).position(|(g, s)| g.enforced && *s == Some(false));
    if let Some(stop) = stop {
        groups[stop + 1..].iter_mut().for_each(|s| *s = None);
    }
    let mut merged = ClientReply {
        now,
        written: stop.is_none(),
        groups,
        replies: vec![None; ask.ops().len()],
    };
    for (part, reply) in parts.iter().zip(replies) {
        for (&i, answer) in part.ops.iter().zip(&reply.replies) {
            merged.replies[i] = answer.map(|a| match a {
                Reply::Charge(Charge::Allowed { tat }) => Reply::Charge(Charge::Allowed {
                    tat: moved(tat, reply.now, now),
                }),
                Reply::Charge(Charge::Denied { tat, wait }) => Reply::Charge(Charge::Denied {
                    tat: moved(tat, reply.now, now),
                    wait,
                }),
                other => other,
            });
        }
    }
    // Everything goes back when the request was stopped; else what refused groups kept.
    let give_back = (0..parts.len())
        .map(|_| {
            (merged.groups.iter())
                .map(|s| stop.is_some() || *s == Some(false))
                .collect()
        })
        .collect();
    (merged, give_back)
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
