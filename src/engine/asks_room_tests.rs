//! An ask never overflows: each limiter plans at most what it says it asks
//! (`Limiter::asks_at_most`), and settings whose sum is past an ask's room are refused.

use super::*;
use crate::classify::Classifier;
use crate::config::{HumanDuration, LimitersConfig, PerIpConfig, QuotaAlgorithm, QuotaConfig};
use crate::limiter::LimiterName;
use crate::store::{AskSize, Op, MAX_QUOTAS};
use crate::tier::Tier;

/// What a `POST /v1/charges` of one client asks of the keyed store under `limiters`, with
/// the server busy (not elastic): every limiter that is on plans its group.
pub(super) fn planned_charge(limiters: &LimitersConfig) -> Ask {
    let classifier = Classifier::new(&Default::default(), 7).unwrap();
    let settings = Settings::new(1, false, limiters.clone(), classifier, false).unwrap();
    let req = Request {
        tier: Tier::Post,
        key: 0x5eed,
        ip: 0x1e,
        method: "POST",
        path: "/v1/charges",
        plan: None,
        preflight: false,
        paid: false,
    };
    let mut ask = Ask::default();
    let modes = settings.modes_for(&req);
    assert!(add_to_ask(&settings, &req, &modes, false, &mut ask));
    ask
}

#[test]
fn each_limiter_plans_at_most_what_it_says_with_every_quota_applying() {
    let mut l = LimitersConfig::default();
    for limiter in LimiterName::ALL {
        limiter.set_mode(&mut l, Mode::Enforce);
    }
    let rr = &mut l.request_rate;
    rr.per_ip = PerIpConfig::new(10.0, 20).into();
    for i in 0..MAX_QUOTAS {
        let algorithm = [QuotaAlgorithm::FixedWindow, QuotaAlgorithm::SlidingLog][i % 2];
        let quota = QuotaConfig::new(format!("q{i}"), algorithm, 5, HumanDuration::from_secs(60));
        rr.quotas.push(quota.with_routes(["POST /v1/charges"]));
    }
    l.validate().expect("the most quotas fit an ask");
    let ask = planned_charge(&l);
    let (mut planned, mut most) = (0, 0);
    for limiter in LimiterName::ALL {
        let said = limiter.asks_at_most(&l);
        most += said.ops;
        let Some((_, group)) = ask.group(limiter as u8) else {
            continue;
        };
        let ops = ask.ops_of(group);
        let slots = ops
            .iter()
            .filter(|op| matches!(op, Op::Slot { .. }))
            .count();
        assert!(
            ops.len() <= said.ops,
            "{limiter:?}: {} > {}",
            ops.len(),
            said.ops
        );
        assert!(slots <= said.slots, "{limiter:?}");
        assert!(said.groups >= 1, "{limiter:?}");
        planned += ops.len();
    }
    // With every limiter on and every quota applying, each asks its most (request_rate:
    // its ceiling, its bucket and every quota): what they say is what they plan.
    assert_eq!(
        planned, most,
        "operations planned against the limiters' asks_at_most"
    );
}

#[test]
fn settings_past_an_asks_room_are_refused_by_what_is_past_it() {
    let one = |ops, slots| AskSize {
        ops,
        slots,
        groups: 1,
    };
    assert_eq!(one(20, 2).past_room(), None);
    let past = one(25, 0)
        .past_room()
        .expect("25 operations are past the room");
    assert!(past.contains("25 operations"), "{past}");
    let past = (0..9)
        .fold(AskSize::default(), |a, _| a.plus(one(1, 0)))
        .past_room();
    assert!(past.expect("nine groups").contains("9 limiters asking"));
    let past = one(5, 5).past_room().expect("five slots");
    assert!(past.contains("5 counted slots"), "{past}");
}
