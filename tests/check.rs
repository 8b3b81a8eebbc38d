//! `Brownout::check`, the decision for code outside actix: it reads each change at once, on
//! the thread that made it and on others, and keeps the settings of two instances apart.

mod common;

use brownout::classify::RequestFacts;
use brownout::ops::Change;
use brownout::Decision;
use common::Rig;

fn facts(key: &str) -> RequestFacts<'_> {
    RequestFacts::new("GET", "/v1/items").with_authorization(key.as_bytes())
}

fn allowed(d: &Decision) -> bool {
    matches!(d, Decision::Allowed(_))
}

#[actix_web::test]
async fn check_reads_every_change_at_once_and_keeps_two_instances_apart() {
    let strict = Rig::new(common::slow_bucket(1));
    let open = Rig::new(common::config());
    let key = "Bearer sk_test_check";

    assert!(allowed(&strict.brownout.check(&facts(key), None)));
    assert!(
        !allowed(&strict.brownout.check(&facts(key), None)),
        "the bucket is empty"
    );
    // The other instance, on the same thread, decides under its own settings.
    assert!(allowed(&open.brownout.check(&facts(key), None)));
    assert!(allowed(&open.brownout.check(&facts(key), None)));
    assert!(!allowed(&strict.brownout.check(&facts(key), None)));

    strict
        .brownout
        .change(Change::KillSwitch(true), "test")
        .await
        .unwrap();
    assert!(
        allowed(&strict.brownout.check(&facts(key), None)),
        "the kill switch holds from the next decision on"
    );
    let b = strict.brownout.clone();
    let elsewhere = std::thread::spawn(move || allowed(&b.check(&facts(key), None)));
    assert!(elsewhere.join().unwrap(), "and on every other thread");

    strict
        .brownout
        .change(Change::KillSwitch(false), "test")
        .await
        .unwrap();
    assert!(!allowed(&strict.brownout.check(&facts(key), None)));
    let b = strict.brownout.clone();
    let elsewhere = std::thread::spawn(move || allowed(&b.check(&facts(key), None)));
    assert!(!elsewhere.join().unwrap());
}

/// `Brownout::check` answers at once, so it cannot hold a request for its turn: with
/// `excess: delay` a request over its bucket is refused with the wait it would have had, and
/// that turn is given back (the next is told the same wait, not a longer one).
#[actix_web::test]
async fn check_refuses_what_it_cannot_hold_and_gives_the_turn_back() {
    let mut config = common::slow_bucket(1);
    let rr = &mut config.limiters.request_rate;
    (rr.rate, rr.excess) = (20.0, brownout::config::Excess::Delay);
    let rig = Rig::new(config);
    let key = "Bearer sk_test_check_paced";
    assert!(allowed(&rig.brownout.check(&facts(key), None)));
    for _ in 0..3 {
        match rig.brownout.check(&facts(key), None) {
            Decision::Rejected(r) => {
                assert_eq!(r.status.as_u16(), 429);
                assert_eq!(r.retry_after, std::time::Duration::from_millis(50));
            }
            Decision::Allowed(_) => panic!("check cannot wait for a turn"),
        }
    }
}
