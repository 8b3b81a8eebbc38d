use super::*;
use crate::control::ShedPlan;
use crate::tier::PerTier;

fn plan(p: f64, at: Duration) -> ShedPlan {
    ShedPlan {
        probability: PerTier {
            critical: 0.0,
            post: 0.0,
            get: p,
            test: 1.0,
        },
        ..ShedPlan::idle(0.0, at)
    }
}

#[test]
fn sheds_with_the_plan_and_says_when_to_retry() {
    let c = WorkerUtilizationConfig::default();
    let mut rng = SplitMix64::new(1);
    let now = Duration::from_secs(100);
    let p = plan(1.0, now);
    let r = check(&c, p.tier(Tier::Get), Tier::Get, 1, now, &mut rng)
        .unwrap()
        .rejection()
        .unwrap();
    assert_eq!(r.status.as_u16(), 503);
    assert_eq!(r.retry_after, Duration::from_secs(8));
    assert_eq!(
        check(&c, p.tier(Tier::Post), Tier::Post, 1, now, &mut rng),
        Ok(Check::Allowed(()))
    );
    assert_eq!(
        check(&c, p.tier(Tier::Critical), Tier::Critical, 1, now, &mut rng),
        Ok(Check::Allowed(()))
    );
}

#[test]
fn a_stale_plan_fails_open_only_when_it_would_shed() {
    let c = WorkerUtilizationConfig::default();
    let mut rng = SplitMix64::new(1);
    let p = plan(1.0, Duration::ZERO);
    let late = Duration::from_secs(25);
    assert_eq!(
        check(&c, p.tier(Tier::Get), Tier::Get, 1, late, &mut rng),
        Err(LimiterError::StalePlan { age: late })
    );
    assert_eq!(
        check(&c, p.tier(Tier::Post), Tier::Post, 1, late, &mut rng),
        Ok(Check::Allowed(()))
    );
    assert!(
        check(&c, p.tier(Tier::Get), Tier::Get, 1, Duration::from_secs(24), &mut rng)
            .unwrap()
            .rejection()
            .is_some()
    );
}
