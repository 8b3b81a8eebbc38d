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
