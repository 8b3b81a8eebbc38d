//! The schedule's draws (rates, mix, ramps, routes, health checks), retries' backoffs, and
//! refusal bodies.

use super::*;

#[test]
fn the_schedule_is_seeded_poisson_at_each_phases_rate_with_the_mix() {
    let phases = phases(Profile::Scorecard, 1.0);
    let plain = Traffic::plain([Duration::from_millis(50); 5]);
    let a = schedule(&phases, 160.0, 7, &plain);
    let b = schedule(&phases, 160.0, 7, &plain);
    assert_eq!(a.len(), b.len(), "the same seed, the same schedule");
    let in_phase = |i: usize| a.iter().filter(|x| x.phase == i).count() as f64;
    // 0.5C for 60 s: 4,800 expected; 4C for 60 s: 38,400.
    assert!((in_phase(0) - 4800.0).abs() < 300.0, "{}", in_phase(0));
    assert!((in_phase(3) - 38400.0).abs() < 800.0, "{}", in_phase(3));
    let critical = a.iter().filter(|x| x.tier == Tier::Critical).count() as f64;
    assert!((critical / a.len() as f64 - 0.1).abs() < 0.01);
    assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(a.iter().all(|x| x.key < KEYS));
}

#[test]
fn the_spikes_keep_their_length_and_the_low_spike_adds_only_test_and_get() {
    let spike = phases(Profile::Spike, 4.0);
    assert_eq!(spike[2].seconds, 50.0, "2C is compressed");
    assert_eq!((spike[4].seconds, spike[4].load), (30.0, 10.0));
    assert_eq!(spike[5].seconds, 30.0, "and the 30 s after it is not");
    let low = phases(Profile::LowSpike, 1.0);
    let a = schedule(
        &low,
        160.0,
        3,
        &Traffic::plain([Duration::from_millis(50); 5]),
    );
    let rate = |tier: Tier| {
        a.iter().filter(|x| x.phase == 2 && x.tier == tier).count() as f64 / 30.0 / 160.0
    };
    // Critical and POST traffic as at 1C; test and GET 11C more between them.
    assert!(
        (rate(Tier::Critical) - 0.1).abs() < 0.03,
        "{}",
        rate(Tier::Critical)
    );
    assert!(
        (rate(Tier::Post) - 0.2).abs() < 0.04,
        "{}",
        rate(Tier::Post)
    );
    assert!((rate(Tier::Get) + rate(Tier::Test) - 11.7).abs() < 0.3);
    assert!((low[2].mix.iter().sum::<f64>() - 1.0).abs() < 1e-12);
}

#[test]
fn a_ramp_rises_without_a_step_and_the_real_app_splits_its_gets_beside_health_checks() {
    let ramp = Phase {
        load_end: 3.0,
        ..phases(Profile::Scorecard, 1.0)[0].clone()
    };
    let ramp = Phase {
        load: 0.3,
        seconds: 300.0,
        ..ramp
    };
    assert_eq!(ramp.load_at(0.0), 0.3);
    assert!((ramp.load_at(150.0) - 1.65).abs() < 1e-12);
    assert_eq!(ramp.load_at(400.0), 3.0, "its end load after it");
    let traffic = Traffic {
        cheap: 0.1,
        gets: [0.5, 0.4, 0.1],
        health: 5.0,
        ..Traffic::plain([Duration::from_millis(20); 5])
    };
    let a = schedule(std::slice::from_ref(&ramp), 100.0, 5, &traffic);
    // The mix's rate follows the ramp: each 30 s slice holds 100 × load(mid) × 30.
    for slice in [0.0, 120.0, 270.0] {
        let n = a
            .iter()
            .filter(|x| x.scored() && (slice..slice + 30.0).contains(&x.at))
            .count() as f64;
        let expected = 100.0 * ramp.load_at(slice + 15.0) * 30.0;
        assert!(
            (n / expected - 1.0).abs() < 0.08,
            "{slice}: {n} vs {expected}"
        );
    }
    let gets: Vec<&Arrival> = a
        .iter()
        .filter(|x| x.scored() && matches!(x.tier, Tier::Get | Tier::Test))
        .collect();
    let share = |r: Route| {
        gets.iter().filter(|x| x.path == Path::Route(r)).count() as f64 / gets.len() as f64
    };
    assert!((share(Route::GetItems) - 0.5).abs() < 0.02);
    assert!((share(Route::GetItem) - 0.4).abs() < 0.02);
    assert!((share(Route::Reports) - 0.1).abs() < 0.01);
    let health: Vec<f64> = a
        .iter()
        .filter(|x| x.path == Path::Health)
        .map(|x| x.at)
        .collect();
    assert_eq!(health.len(), 1500, "5 a second, whatever the load");
    assert!(health.windows(2).all(|w| (w[1] - w[0] - 0.2).abs() < 1e-9));
    let cheap = a.iter().filter(|x| x.path == Path::Missing).count() as f64;
    assert!(
        (cheap / a.iter().filter(|x| x.path != Path::Health).count() as f64 - 0.1).abs() < 0.01
    );
    assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
    let report = a.iter().find(|x| x.path == Path::Route(Route::Reports));
    assert_eq!(report.map(|x| x.work), Some(0.02), "each its route's time");
}

#[test]
fn simulate_models_the_matrix_profile_as_the_bench_runs_it() {
    use brownout::simulate::profile::{built_in, compress_like_bench};
    for f in [1.0, 4.0, 20.0] {
        let bench = phases(Profile::Matrix, f);
        let mut model = built_in("matrix").unwrap();
        compress_like_bench(&mut model, f);
        assert_eq!(bench.len(), model.len());
        for (b, m) in bench.iter().zip(&model) {
            assert_eq!(
                (b.name, b.seconds, b.load, b.load_end, b.slow),
                (m.name.as_str(), m.seconds, m.from, m.to, m.slowdown > 1.0),
                "compressed {f} times"
            );
        }
    }
}
