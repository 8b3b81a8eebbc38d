use super::*;
use crate::schema::QuotaAlgorithm;
use proptest::prelude::*;

const SEC: u64 = 1_000_000;

fn rule(limit: u32, window: u64) -> WindowRule {
    WindowRule {
        algorithm: QuotaAlgorithm::SlidingLog,
        limit,
        window,
    }
}

/// The reference: every event ever kept, and a request fits while fewer than `limit` of them
/// are younger than one window. No trimming, no bound, nothing clever.
#[derive(Default)]
struct Model {
    kept: Vec<u64>,
}

impl Model {
    fn in_window(&self, r: &WindowRule, now: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .kept
            .iter()
            .copied()
            .filter(|&t| t + r.window > now)
            .collect();
        v.sort_unstable();
        v
    }

    fn hit(&mut self, r: &WindowRule, now: u64, add: bool) -> WindowCheck {
        let live = self.in_window(r, now);
        let limit = r.limit as usize;
        let allowed = live.len() < limit;
        if allowed && add {
            self.kept.push(now);
        }
        let after = self.in_window(r, now);
        WindowCheck {
            allowed,
            remaining: limit.saturating_sub(after.len()) as u32,
            reset: after.first().map_or(0, |&t| t + r.window - now),
            // The first moment at which fewer than `limit` remain.
            retry: if allowed {
                0
            } else {
                live[live.len() - limit] + r.window - now
            },
        }
    }

    fn refund(&mut self, at: u64) {
        if let Some(i) = self.kept.iter().rposition(|&t| t == at) {
            self.kept.remove(i);
        }
    }
}

#[test]
fn no_rolling_window_holds_more_than_the_limit() {
    // 3 a minute: three at 59.9 s, then one at 60.1 s (the counters' boundary), one at 119.9
    // s (the first has not left yet), one at 119.95 s (it has).
    let r = rule(3, 60 * SEC);
    let mut log = VecDeque::new();
    let times = [
        59_900_000,
        59_950_000,
        59_990_000,
        60_100_000,
        119_899_999,
        119_900_000,
    ];
    let got: Vec<bool> = times
        .iter()
        .map(|&t| r.log_hit(&mut log, t, true).allowed)
        .collect();
    assert_eq!(got, [true, true, true, false, false, true]);
}

#[test]
fn fields_name_what_is_left_and_when_the_oldest_leaves() {
    let r = rule(2, 10 * SEC);
    let mut log = VecDeque::new();
    let first = r.log_hit(&mut log, 100 * SEC, true);
    assert_eq!(
        (first.remaining, first.reset, first.retry),
        (1, 10 * SEC, 0)
    );
    let second = r.log_hit(&mut log, 104 * SEC, true);
    assert_eq!((second.remaining, second.reset), (0, 6 * SEC));
    let refused = r.log_hit(&mut log, 105 * SEC, true);
    assert!(!refused.allowed);
    assert_eq!(
        (refused.remaining, refused.reset, refused.retry),
        (0, 5 * SEC, 5 * SEC)
    );
    // A check that does not record (a failure quota before the response) spends nothing.
    let peek = r.log_hit(&mut log, 110 * SEC, false);
    assert!(peek.allowed);
    assert_eq!((peek.remaining, peek.reset), (1, 4 * SEC));
    assert_eq!(log.len(), 1);
}

#[test]
fn a_refund_takes_back_its_own_event() {
    let r = rule(2, 10 * SEC);
    let mut log = VecDeque::new();
    r.log_hit(&mut log, SEC, true);
    r.log_hit(&mut log, 2 * SEC, true);
    assert!(!r.log_hit(&mut log, 3 * SEC, true).allowed);
    r.log_refund(&mut log, SEC);
    assert_eq!(log, [2 * SEC], "the event recorded at 1 s, not the newest");
    assert!(r.log_hit(&mut log, 3 * SEC, true).allowed);
    // One that is gone already (it left the window) takes nothing else back.
    r.log_refund(&mut log, 7 * SEC);
    assert_eq!(log.len(), 2);
}

#[test]
fn a_lowered_limit_refuses_until_fewer_remain_and_bounds_the_log() {
    let old = rule(10, 60 * SEC);
    let mut log = VecDeque::new();
    for i in 0..10 {
        assert!(old.log_hit(&mut log, i * SEC, true).allowed);
    }
    let new = rule(3, 60 * SEC);
    let refused = new.log_hit(&mut log, 20 * SEC, true);
    assert!(!refused.allowed);
    // Fewer than 3 remain once the event at 7 s leaves, at 67 s.
    assert_eq!(refused.retry, 47 * SEC);
    assert_eq!(
        log.len(),
        3,
        "the events older than the newest `limit` are dropped"
    );
    assert!(new.log_hit(&mut log, 67 * SEC, true).allowed);
    assert!(new.log_idle(&log, 69 * SEC + 60 * SEC));
    assert!(!new.log_idle(&log, 68 * SEC));
}

#[test]
fn a_clock_that_steps_back_keeps_the_log_in_order() {
    let r = rule(3, 10 * SEC);
    let mut log = VecDeque::new();
    r.log_hit(&mut log, 50 * SEC, true);
    r.log_hit(&mut log, 48 * SEC, true);
    assert_eq!(log, [48 * SEC, 50 * SEC]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every decision and field equal to the brute-force reference over random schedules:
    /// gaps around the window's length (boundaries), bursts at one instant, checks that do
    /// not record, refunds of earlier events, and limits and windows changed live.
    #[test]
    fn matches_a_brute_force_log(
        limit in 1u32..8,
        window in 1u64..50,
        steps in proptest::collection::vec((0u64..30, 0u8..10, 0usize..6), 1..300),
    ) {
        let mut r = rule(limit, window);
        let (mut log, mut model) = (VecDeque::new(), Model::default());
        let mut now = 0;
        for (gap, what, pick) in steps {
            now += gap;
            match what {
                0 => {
                    // A refund of one of the last events recorded.
                    if let Some(&at) = model.kept.iter().rev().nth(pick) {
                        r.log_refund(&mut log, at);
                        model.refund(at);
                    }
                }
                1 => {
                    // The limit raised live: the log (bounded by the old limit) and the
                    // reference (which kept everything) must still agree.
                    r = rule(r.limit + 1, r.window);
                }
                _ => {
                    let add = what != 2;
                    prop_assert_eq!(r.log_hit(&mut log, now, add), model.hit(&r, now, add));
                    prop_assert!(log.len() <= r.limit as usize);
                    prop_assert!(log.iter().zip(log.iter().skip(1)).all(|(a, b)| a <= b));
                }
            }
        }
    }
}
