//! Cluster mode: a script may only touch keys of one slot, so one request's ask is split by
//! hash tag (the client's keys, the IP's keys, the fleet's set), the parts are sent at once,
//! and their replies are merged into the answer one script would have given. What the parts
//! wrote that one script would not have (a part passed while another refused) is given back.

use super::script::{ClientAsk, ClientReply};
use crate::math::gcra::Charge;
use arrayvec::ArrayVec;

/// The part of an ask whose keys share one Redis Cluster hash slot, and where its buckets and
/// quotas sit in the whole ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SlotAsk {
    pub(super) ask: ClientAsk,
    buckets: Vec<usize>,
    quotas: Vec<usize>,
}

/// What to give back of a part's writes once all replies are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GiveBack {
    /// Nothing: the merged answer keeps it.
    Nothing,
    /// Its rate charges (a bucket or quota of another part refused).
    Rate,
    /// Everything (an enforced refusal in another part stopped the request).
    All,
}

/// `ask` split by hash tag: one part per tag, then the fleet slot on its own.
pub(super) fn split(ask: &ClientAsk) -> Vec<SlotAsk> {
    let mut parts: Vec<(u64, SlotAsk)> = Vec::new();
    // Every field of the ask named, without `..`: a field added to `ClientAsk` does not
    // compile here until this says which part carries it (else fleet mode would drop it).
    let ClientAsk {
        buckets,
        quotas,
        // Read from the whole ask by the limiter that decides, never from a part.
        plan: _,
        elastic: _,
        in_flight,
        rate_enforced,
        in_flight_enforced,
        fleet,
        fleet_enforced,
    } = ask;
    let blank = || SlotAsk {
        ask: ClientAsk {
            buckets: ArrayVec::new(),
            quotas: ArrayVec::new(),
            plan: 0,
            elastic: false,
            in_flight: None,
            rate_enforced: *rate_enforced,
            in_flight_enforced: *in_flight_enforced,
            fleet: None,
            fleet_enforced: *fleet_enforced,
        },
        buckets: Vec::new(),
        quotas: Vec::new(),
    };
    let part_of = |tag: u64, parts: &mut Vec<(u64, SlotAsk)>| -> usize {
        parts
            .iter()
            .position(|(t, _)| *t == tag)
            .unwrap_or_else(|| {
                parts.push((tag, blank()));
                parts.len() - 1
            })
    };
    for (i, b) in buckets.iter().enumerate() {
        let at = part_of(b.tag, &mut parts);
        parts[at].1.ask.buckets.push(*b);
        parts[at].1.buckets.push(i);
    }
    for (i, q) in quotas.iter().enumerate() {
        let at = part_of(q.key, &mut parts);
        parts[at].1.ask.quotas.push(*q);
        parts[at].1.quotas.push(i);
    }
    if let Some(permit) = *in_flight {
        let at = part_of(permit.key, &mut parts);
        parts[at].1.ask.in_flight = Some(permit);
    }
    let mut parts: Vec<SlotAsk> = parts.into_iter().map(|(_, p)| p).collect();
    if let Some(slot) = *fleet {
        let mut fleet = blank();
        fleet.ask.fleet = Some(slot);
        parts.push(fleet);
    }
    parts
}

/// `t` on the clock of a part that read `from`, moved to one that read `to`.
fn moved(t: u64, from: u64, to: u64) -> u64 {
    (i128::from(t) - i128::from(from) + i128::from(to)).clamp(0, i128::from(u64::MAX)) as u64
}

/// The answer one script would have given to `ask`, from its parts' `replies` (one each, in
/// order), and what to give back of each part.
pub(super) fn merge(
    ask: &ClientAsk,
    parts: &[SlotAsk],
    replies: &[ClientReply],
) -> (ClientReply, Vec<GiveBack>) {
    let now = replies.first().map_or(0, |r| r.now);
    let rate_refused = replies.iter().any(|r| r.rate_refused);
    let in_flight = replies.iter().find_map(|r| r.in_flight);
    let fleet = replies.iter().find_map(|r| r.fleet);
    let stopped = (rate_refused && ask.rate_enforced)
        || (in_flight == Some(false) && ask.in_flight_enforced)
        || (fleet == Some(false) && ask.fleet_enforced);
    let mut merged = ClientReply {
        now,
        rate_refused,
        rate_written: !rate_refused && !stopped,
        in_flight,
        in_flight_written: !stopped && replies.iter().any(|r| r.in_flight_written),
        fleet,
        fleet_written: !stopped && replies.iter().any(|r| r.fleet_written),
        buckets: vec![None; ask.buckets.len()],
        quotas: vec![None; ask.quotas.len()],
    };
    for (part, reply) in parts.iter().zip(replies) {
        for (&i, answer) in part.buckets.iter().zip(&reply.buckets) {
            merged.buckets[i] = answer.map(|c| match c {
                Charge::Allowed { tat } => Charge::Allowed {
                    tat: moved(tat, reply.now, now),
                },
                Charge::Denied { tat, wait } => Charge::Denied {
                    tat: moved(tat, reply.now, now),
                    wait,
                },
            });
        }
        for (&i, answer) in part.quotas.iter().zip(&reply.quotas) {
            merged.quotas[i] = *answer;
        }
    }
    let give_back = replies
        .iter()
        .map(|_| {
            if stopped {
                GiveBack::All
            } else if rate_refused {
                GiveBack::Rate
            } else {
                GiveBack::Nothing
            }
        })
        .collect();
    (merged, give_back)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::window::{WindowCheck, WindowRule};
    use crate::schema::QuotaAlgorithm;
    use crate::store::ask::{BucketAsk, QuotaAsk, SlotsAsk};
    use crate::store::Table;

    const CLIENT: u64 = 7;
    const IP: u64 = 9;

    fn ask() -> ClientAsk {
        let rule = WindowRule {
            algorithm: QuotaAlgorithm::FixedWindow,
            limit: 3,
            window: 1_000_000,
        };
        ClientAsk {
            buckets: [
                BucketAsk {
                    table: Table::new(0),
                    key: 1234,
                    tag: IP,
                    increment: 10,
                    tolerance: 100,
                },
                BucketAsk {
                    table: Table::new(0),
                    key: CLIENT,
                    tag: CLIENT,
                    increment: 20,
                    tolerance: 100,
                },
            ]
            .into_iter()
            .collect(),
            quotas: [
                QuotaAsk {
                    table: Table::new(1),
                    index: 0,
                    key: CLIENT,
                    rule,
                    count: true,
                },
                QuotaAsk {
                    table: Table::new(2),
                    index: 1,
                    key: IP,
                    rule,
                    count: true,
                },
            ]
            .into_iter()
            .collect(),
            in_flight: Some(SlotsAsk {
                table: Table::new(17),
                key: CLIENT,
                max: 5,
            }),
            rate_enforced: true,
            in_flight_enforced: true,
            fleet: Some(SlotsAsk {
                table: Table::new(18),
                key: 0,
                max: 10,
            }),
            fleet_enforced: true,
            ..ClientAsk::default()
        }
    }

    fn passed(part: &SlotAsk, now: u64) -> ClientReply {
        let quota = WindowCheck {
            allowed: true,
            remaining: 1,
            reset: 5,
            retry: 0,
        };
        ClientReply {
            now,
            rate_refused: false,
            rate_written: !part.buckets.is_empty() || !part.quotas.is_empty(),
            in_flight: part.ask.in_flight.map(|_| true),
            in_flight_written: part.ask.in_flight.is_some(),
            fleet: part.ask.fleet.map(|_| true),
            fleet_written: part.ask.fleet.is_some(),
            buckets: part
                .ask
                .buckets
                .iter()
                .map(|b| {
                    Some(Charge::Allowed {
                        tat: now + b.increment,
                    })
                })
                .collect(),
            quotas: part.ask.quotas.iter().map(|_| Some(quota)).collect(),
        }
    }

    #[test]
    fn one_part_per_hash_tag_and_the_fleet_apart() {
        let parts = split(&ask());
        assert_eq!(parts.len(), 3);
        let ip = &parts[0].ask;
        assert_eq!((ip.buckets[0].tag, ip.quotas[0].index), (IP, 1));
        assert_eq!((ip.in_flight, ip.fleet), (None, None));
        let client = &parts[1].ask;
        assert_eq!((client.buckets[0].key, client.quotas[0].index), (CLIENT, 0));
        assert_eq!(client.in_flight.map(|p| (p.key, p.max)), Some((CLIENT, 5)));
        assert_eq!(parts[2].ask.fleet.map(|f| f.max), Some(10));
        assert!(parts[2].ask.buckets.is_empty() && parts[2].ask.in_flight.is_none());
        assert!(parts
            .iter()
            .all(|p| p.ask.rate_enforced && p.ask.fleet_enforced));
        // A client keyed by its IP has one part for both.
        let mut same = ask();
        same.buckets[1].key = IP;
        same.buckets[1].tag = IP;
        same.quotas[0].key = IP;
        same.in_flight = Some(SlotsAsk {
            table: Table::new(17),
            key: IP,
            max: 5,
        });
        assert_eq!(split(&same).len(), 2);
    }

    #[test]
    fn merged_answers_sit_where_one_script_put_them_on_one_clock() {
        let ask = ask();
        let parts = split(&ask);
        // The IP's node reads a clock 30 µs behind the client's.
        let replies = vec![
            passed(&parts[0], 970),
            passed(&parts[1], 1_000),
            passed(&parts[2], 1_000),
        ];
        let (merged, give_back) = merge(&ask, &parts, &replies);
        assert_eq!(merged.now, 970);
        assert_eq!(merged.buckets[0], Some(Charge::Allowed { tat: 980 }));
        assert_eq!(merged.buckets[1], Some(Charge::Allowed { tat: 990 }));
        assert_eq!(merged.quotas.iter().flatten().count(), 2);
        assert!(merged.rate_written && merged.in_flight_written && merged.fleet_written);
        assert_eq!(give_back, vec![GiveBack::Nothing; 3]);
    }

    #[test]
    fn a_refusal_in_one_part_gives_back_what_the_others_took() {
        let ask = ask();
        let parts = split(&ask);
        let mut replies: Vec<ClientReply> = parts.iter().map(|p| passed(p, 1_000)).collect();
        // The fleet is full, enforced: nothing may be kept anywhere.
        replies[2].fleet = Some(false);
        replies[2].fleet_written = false;
        let (merged, give_back) = merge(&ask, &parts, &replies);
        assert!(!merged.rate_written && !merged.in_flight_written && !merged.fleet_written);
        assert_eq!(merged.fleet, Some(false));
        assert_eq!(give_back, vec![GiveBack::All; 3]);
        // The per-IP ceiling refuses in dark mode: only the rate charges go back.
        let mut dark = ask.clone();
        dark.rate_enforced = false;
        let mut replies: Vec<ClientReply> = parts.iter().map(|p| passed(p, 1_000)).collect();
        replies[0].rate_refused = true;
        replies[0].rate_written = false;
        replies[0].buckets[0] = Some(Charge::Denied {
            tat: 1_100,
            wait: 10,
        });
        let (merged, give_back) = merge(&dark, &parts, &replies);
        assert!(merged.rate_refused && !merged.rate_written);
        assert!(merged.in_flight_written && merged.fleet_written);
        assert_eq!(give_back, vec![GiveBack::Rate; 3]);
    }
}
