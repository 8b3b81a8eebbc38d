//! Unit tests of `plan.rs`.

use super::*;

/// The drop probabilities at `amount` under the default bands and caps.
fn at(amount: f64) -> PerTier<f64> {
    probabilities(amount, &Bands::default(), &MaxShed::default(), false)
}

#[test]
fn a_published_plan_reads_back_whole() {
    let plan = ShedPlan {
        utilization: 0.9,
        demand: 1.7,
        amount: 0.5,
        probability: PerTier {
            critical: 0.0,
            post: 0.0,
            get: 0.5,
            test: 1.0,
        },
        at: Duration::from_millis(1500),
        samples: 7,
    };
    let published = PublishedPlan::new(&ShedPlan::idle(-0.2, Duration::ZERO));
    assert_eq!(published.load().amount, -0.2);
    published.store(&plan);
    assert_eq!(published.load(), plan);
}

#[test]
fn bands_shed_test_then_get_then_post_never_critical() {
    assert_eq!(at(-0.2), PerTier::splat(0.0));
    assert_eq!(at(0.0), PerTier::splat(0.0));
    let p = at(1.0 / 6.0);
    assert!((p.test - 0.5).abs() < 1e-12 && p.get == 0.0 && p.post == 0.0);
    let p = at(0.5);
    assert!(p.test == 1.0 && (p.get - 0.5).abs() < 1e-12 && p.post == 0.0);
    let p = at(5.0 / 6.0);
    assert!(p.test == 1.0 && p.get == 1.0 && (p.post - 0.5).abs() < 1e-12);
    let p = at(1.0);
    assert_eq!((p.test, p.get, p.post, p.critical), (1.0, 1.0, 1.0, 0.0));
    // Monotone in the amount and ordered by tier at every step.
    let mut prev = at(-0.3);
    for i in 0..=100 {
        let p = at(i as f64 / 100.0);
        assert!(p.test >= p.get && p.get >= p.post && p.post >= p.critical);
        for t in Tier::ALL {
            assert!(p.get(t) >= prev.get(t));
        }
        prev = p;
    }
}

#[test]
fn critical_only_with_shed_critical() {
    let bands = Bands {
        critical: Some([0.9, 1.0]),
        ..Bands::default()
    };
    let max = MaxShed::default();
    assert_eq!(probabilities(1.0, &bands, &max, false).critical, 0.0);
    assert!((probabilities(0.95, &bands, &max, true).critical - 0.5).abs() < 1e-9);
}

#[test]
fn max_shed_caps_a_tier() {
    let max = MaxShed {
        get: 0.25,
        ..MaxShed::default()
    };
    let p = probabilities(1.0, &Bands::default(), &max, false);
    assert_eq!((p.test, p.get, p.post), (1.0, 0.25, 1.0));
}

#[test]
fn random_selection_matches_the_probability() {
    let (random, rotation) = (Selection::Random, Duration::from_secs(300));
    let mut rng = SplitMix64::new(3);
    let n = 20_000;
    let dropped = (0..n)
        .filter(|&k| should_drop(0.3, random, rotation, k, Duration::ZERO, &mut rng))
        .count();
    let share = dropped as f64 / n as f64;
    assert!((share - 0.3).abs() < 0.02, "{share}");
    assert!(!should_drop(
        0.0,
        random,
        rotation,
        1,
        Duration::ZERO,
        &mut rng
    ));
    assert!(should_drop(
        1.0,
        random,
        rotation,
        1,
        Duration::ZERO,
        &mut rng
    ));
}

#[test]
fn cohort_sheds_the_same_keys_within_a_rotation_and_others_after() {
    let rotation = Duration::from_secs(60);
    let mut rng = SplitMix64::new(9);
    let shed_at = |now: u64, rng: &mut SplitMix64| -> Vec<u64> {
        (0..2_000u64)
            .filter(|&k| {
                should_drop(
                    0.25,
                    Selection::Cohort,
                    rotation,
                    k,
                    Duration::from_secs(now),
                    rng,
                )
            })
            .collect()
    };
    let first = shed_at(0, &mut rng);
    let share = first.len() as f64 / 2_000.0;
    assert!((share - 0.25).abs() < 0.04, "{share}");
    // Within the rotation (and whatever the rng does) the same keys are shed.
    assert_eq!(first, shed_at(30, &mut rng));
    assert_eq!(first, shed_at(59, &mut rng));
    // After it, a different cohort.
    let next = shed_at(60, &mut rng);
    let overlap = next.iter().filter(|k| first.contains(k)).count();
    assert!(
        overlap < first.len() / 2,
        "overlap {overlap} of {}",
        first.len()
    );
}
