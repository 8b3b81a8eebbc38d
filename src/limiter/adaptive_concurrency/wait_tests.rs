use super::*;
use crate::limiter::adaptive_concurrency::acquire;
use crate::limiter::Check;
use std::task::Waker;

fn config(queue: u32) -> AdaptiveConcurrencyConfig {
    AdaptiveConcurrencyConfig {
        queue,
        get_share: 1.0,
        test_share: 1.0,
        tier_hold: crate::schema::HumanDuration::from_secs(0),
        ..AdaptiveConcurrencyConfig::default()
    }
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A slot of `tier` at `at` ms: `Some(Ok(permit))`, `Some(Err(wait))`, `None` if refused.
fn take<'a>(
    c: &AdaptiveConcurrencyConfig,
    s: &'a Arc<AdaptiveState>,
    tier: Tier,
    at: u64,
) -> Option<Result<AdaptivePermit<'a>, Wait>> {
    match acquire(c, s, (tier, 0), ms(at), true).unwrap() {
        Check::Allowed(Place::Held(p)) => Some(Ok(p)),
        Check::Allowed(Place::Waiting(w)) => Some(Err(w)),
        Check::Rejected(..) => None,
    }
}

fn waits(slot: Option<Result<AdaptivePermit<'_>, Wait>>) -> Wait {
    match slot {
        Some(Err(w)) => w,
        other => panic!("expected to wait, got {other:?}"),
    }
}

fn poll(w: &mut Wait) -> Poll<Result<Duration, TurnedAway>> {
    Pin::new(w).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_freed_slot_goes_to_the_highest_tier_waiting_then_the_oldest() {
    let c = config(8);
    let s = Arc::new(AdaptiveState::new(2.0));
    let held: Vec<_> = (0..2)
        .map(|_| take(&c, &s, Tier::Post, 0).unwrap().unwrap().keep())
        .collect();
    let mut post = waits(take(&c, &s, Tier::Post, 1));
    let mut post2 = waits(take(&c, &s, Tier::Post, 2));
    let mut get = waits(take(&c, &s, Tier::Get, 3));
    let mut test = waits(take(&c, &s, Tier::Test, 4));
    assert_eq!((s.waiting(), s.in_flight()), (4, 2));
    assert!(poll(&mut post).is_pending());
    let critical = take(&c, &s, Tier::Critical, 5).unwrap().unwrap();
    assert_eq!(s.in_flight(), 3, "critical passes, counted");
    drop(critical);
    assert!(s.take_window(5).binding(), "waiting is the limit binding");

    s.release(Tier::Post, Some(micros(ms(10) - held[0])), ms(10));
    assert_eq!(poll(&mut post), Poll::Ready(Ok(ms(10))), "post first");
    assert!(poll(&mut post2).is_pending() && poll(&mut get).is_pending());
    s.release(Tier::Post, None, ms(11));
    assert_eq!(poll(&mut post2), Poll::Ready(Ok(ms(11))));
    s.release(Tier::Post, None, ms(12));
    assert_eq!(poll(&mut get), Poll::Ready(Ok(ms(12))), "then get");
    assert!(poll(&mut test).is_pending());
    assert_eq!((s.waiting(), s.in_flight()), (1, 2));
    // A newcomer does not pass a waiting request of its tier or a higher one.
    let mut test2 = waits(take(&c, &s, Tier::Test, 13));
    s.release(Tier::Post, None, ms(14));
    assert_eq!(poll(&mut test), Poll::Ready(Ok(ms(14))), "oldest first");
    assert!(poll(&mut test2).is_pending());
    // A grown limit lets it in at the next dispatch.
    s.publish(3.0, [None; 4]);
    s.dispatch(ms(15));
    assert_eq!(poll(&mut test2), Poll::Ready(Ok(ms(15))));
    assert_eq!((s.waiting(), s.in_flight()), (0, 3));
}

#[test]
fn a_request_that_has_to_wait_goes_ahead_of_lower_tiers_and_takes_their_place_when_full() {
    let c = AdaptiveConcurrencyConfig {
        tier_hold: crate::schema::HumanDuration::from_secs(1),
        ..config(2)
    };
    let s = Arc::new(AdaptiveState::new(1.0));
    let held = take(&c, &s, Tier::Post, 0).unwrap().unwrap();
    let mut test = waits(take(&c, &s, Tier::Test, 1));
    let mut get = waits(take(&c, &s, Tier::Get, 2));
    assert!(
        poll(&mut test).is_pending(),
        "with room for both, the test request waits on, behind the GET"
    );
    // The room is full: a POST takes the place of the newest of the lowest tier.
    let mut post = waits(take(&c, &s, Tier::Post, 3));
    assert_eq!(poll(&mut test), Poll::Ready(Err(TurnedAway)));
    assert!(poll(&mut get).is_pending());
    assert!(
        take(&c, &s, Tier::Test, 4).is_none(),
        "a full room and no tier below it"
    );
    let _post2 = waits(take(&c, &s, Tier::Post, 5));
    assert_eq!(poll(&mut get), Poll::Ready(Err(TurnedAway)));
    // A POST refused (the room is full of POSTs) holds GETs off until 1.006 s.
    assert!(take(&c, &s, Tier::Post, 6).is_none(), "full of posts");
    assert!(take(&c, &s, Tier::Get, 1005).is_none(), "held off");
    assert!(
        s.wait(&c, Tier::Get, ms(5)).is_none(),
        "one that looked before the hold finds it at the room's door"
    );
    assert!(
        take(&c, &s, Tier::Get, 1006).is_none(),
        "the hold is over, but the room is full of a higher tier"
    );
    assert_eq!((s.waiting(), s.in_flight()), (2, 1));
    drop(held);
    assert_eq!(s.waiting(), 1, "a POST was given the slot");
    assert!(matches!(poll(&mut post), Poll::Ready(Ok(_))), "the oldest");
    let mut get = waits(take(&c, &s, Tier::Get, 1008));
    assert!(poll(&mut get).is_pending(), "behind the POST still waiting");
    assert_eq!(c.max_wait_for(Tier::Post), ms(400));
    assert_eq!(c.max_wait_for(Tier::Get), ms(250));
}

#[test]
fn leaving_the_room_gives_back_what_the_wait_held() {
    let c = config(4);
    let s = Arc::new(AdaptiveState::new(1.0));
    let held = take(&c, &s, Tier::Post, 0).unwrap().unwrap();
    let gone = waits(take(&c, &s, Tier::Get, 1));
    let granted = waits(take(&c, &s, Tier::Post, 2));
    let mut next = waits(take(&c, &s, Tier::Get, 3));
    drop(gone);
    assert_eq!(
        s.waiting(),
        2,
        "a request that left (timed out) no longer waits"
    );
    drop(held);
    assert_eq!(
        (s.waiting(), s.in_flight()),
        (1, 1),
        "the POST got the slot"
    );
    // It leaves before taking it (its wait timed out just then): the slot passes on.
    drop(granted);
    assert_eq!(poll(&mut next), Poll::Ready(Ok(ms(0))));
    assert_eq!((s.waiting(), s.in_flight()), (0, 1));
}

#[test]
fn without_a_queue_or_leave_to_wait_a_request_is_refused_at_once() {
    let s = Arc::new(AdaptiveState::new(1.0));
    let c = config(0);
    let _held = take(&c, &s, Tier::Post, 0).unwrap().unwrap();
    assert!(take(&c, &s, Tier::Post, 1).is_none());
    let c = config(4);
    let refused = acquire(&c, &s, (Tier::Post, 0), ms(2), false).unwrap();
    assert!(matches!(refused, Check::Rejected(..)));
    assert_eq!(s.waiting(), 0);
}

#[test]
fn a_wait_that_runs_out_takes_room_under_the_whole_limit_when_the_tiers_above_fit() {
    // A limit of 10: GETs may hold 9, test requests 8, each counting the tiers above it.
    let c = AdaptiveConcurrencyConfig {
        get_share: 0.9,
        test_share: 0.8,
        ..config(8)
    };
    let s = Arc::new(AdaptiveState::new(10.0));
    let gets: Vec<_> = (0..9)
        .map(|_| take(&c, &s, Tier::Get, 0).unwrap().unwrap().keep())
        .collect();
    let mut test = waits(take(&c, &s, Tier::Test, 1));
    assert_eq!(s.last_look_of(&mut test, 251), Some(ms(251)), "9 + 1 fit in 10");
    assert_eq!((s.waiting(), s.in_flight()), (0, 10));
    assert_eq!(poll(&mut test), Poll::Ready(Ok(ms(251))), "settled as let in");

    // A GET waiting is counted ahead of a test request: 10 in flight and 1 waiting leave no
    // room.
    let mut get = waits(take(&c, &s, Tier::Get, 300));
    let mut test2 = waits(take(&c, &s, Tier::Test, 301));
    assert_eq!(s.last_look_of(&mut test2, 551), None);
    assert_eq!(s.waiting(), 2, "in the room until dropped");
    drop(test2);
    assert_eq!(s.waiting(), 1);
    // The GET's own last look counts the GETs in flight: 9, room for one more under 10.
    assert_eq!(s.last_look_of(&mut get, 550), Some(ms(550)));
    assert_eq!((s.waiting(), s.in_flight()), (0, 11));

    // Given its slot (once 7 are in flight) just before its wait ran out: it keeps it.
    let mut test3 = waits(take(&c, &s, Tier::Test, 601));
    for at in 700..704 {
        s.release(Tier::Get, None, ms(at));
    }
    assert_eq!(s.last_look_of(&mut test3, 851), Some(ms(703)));
    assert_eq!((s.waiting(), s.in_flight()), (0, 8));
    drop((gets, test3));
}

#[test]
fn a_wait_that_runs_out_within_tier_hold_of_any_refusal_is_refused() {
    let c = AdaptiveConcurrencyConfig {
        test_share: 0.5,
        tier_hold: crate::schema::HumanDuration::from_secs(1),
        ..config(8)
    };
    let s = Arc::new(AdaptiveState::new(4.0));
    let gets: Vec<_> = (0..2)
        .map(|_| take(&c, &s, Tier::Get, 0).unwrap().unwrap().keep())
        .collect();
    let mut test = waits(take(&c, &s, Tier::Test, 1));
    let mut test2 = waits(take(&c, &s, Tier::Test, 2));
    // A test request refused (a tier below none) still marks brownout as refusing.
    s.refuse(&c, Tier::Test, 100_000);
    assert_eq!(s.last_look_of(&mut test, 251), None, "refusing until 1.1 s");
    drop(test);
    assert_eq!(s.last_look_of(&mut test2, 1_100), Some(ms(1_100)), "quiet again");
    drop((gets, test2));
}

impl AdaptiveState {
    /// `wait`'s last look at `at` ms.
    fn last_look_of(&self, wait: &mut Wait, at: u64) -> Option<Duration> {
        assert!(std::ptr::eq(self, &*wait.state));
        wait.last_look(ms(at))
    }
}

#[test]
fn the_room_lets_the_lower_tiers_in_under_the_lane() {
    let c = config(8);
    let s = Arc::new(AdaptiveState::new(10.0));
    s.publish_lane(2.0);
    let held: Vec<_> = (0..2)
        .map(|_| take(&c, &s, Tier::Post, 0).unwrap().unwrap().keep())
        .collect();
    let mut post = waits(take(&c, &s, Tier::Post, 1));
    let critical = take(&c, &s, Tier::Critical, 2).unwrap().unwrap();
    drop(critical);
    assert!(poll(&mut post).is_pending(), "a critical slot given back: 2 POSTs, the lane");
    s.release(Tier::Post, Some(micros(ms(10) - held[0])), ms(10));
    assert_eq!(poll(&mut post), Poll::Ready(Ok(ms(10))));
    let mut next = waits(take(&c, &s, Tier::Post, 11));
    // Its wait runs out: its last look counts the lane too.
    assert_eq!(s.last_look_of(&mut next, 261), None, "2 in flight fill the lane");
    drop(next);
    let mut last = waits(take(&c, &s, Tier::Post, 300));
    // The controller stops shedding: the next dispatch lets it in under the limit.
    s.publish_lane(f64::INFINITY);
    s.dispatch(ms(301));
    assert_eq!(poll(&mut last), Poll::Ready(Ok(ms(301))));
    assert_eq!(s.in_flight(), 3);
    drop(held);
}
