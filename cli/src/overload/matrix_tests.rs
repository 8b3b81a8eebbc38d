//! App specs as `--app` reads them, and the matrix row's arithmetic.

use super::*;
use crate::overload::app::*;
use brownout_cli::config::Route;
use brownout_cli::config::{CliConfig, DemoWork};
use std::time::Duration;

#[test]
fn app_specs_read_workers_times_work_and_what_is_beside_the_load() {
    let a: AppSpec = "8x50ms".parse().unwrap();
    assert_eq!(
        (a.workers, a.times, a.work, a.cheap, a.spread, a.health, a.cold),
        (
            8,
            Times::One(Duration::from_millis(50)),
            DemoWork::Sleep,
            0.0,
            0.0,
            false,
            false
        )
    );
    let b: AppSpec = "2x10ms:cpu".parse().unwrap();
    assert_eq!((b.workers, b.work), (2, DemoWork::Cpu));
    let c: AppSpec = "8xmixed+cheap".parse().unwrap();
    assert_eq!((c.times, c.cheap), (Times::Mixed, CHEAP_SHARE));
    assert_eq!(c.folder(), "8xmixed-cheap");
    let d: AppSpec = "5xmixed+cheap30~0.5".parse().unwrap();
    assert_eq!((d.workers, d.cheap, d.spread), (5, 0.3, 0.5));
    let cold = Duration::from_secs(60);
    assert_eq!(d.apply(&CliConfig::default(), cold).demo.spread, 0.5);
    assert_eq!(d.folder(), "5xmixed-cheap30-0.5");
    let e: AppSpec = "6xreal+health+cold~0.5".parse().unwrap();
    assert_eq!(
        (e.times, e.health, e.cold, e.cheap),
        (Times::Real, true, true, 0.0)
    );
    let real = e.apply(&CliConfig::default(), cold);
    assert_eq!(real.demo.times(), REAL);
    assert_eq!(real.demo.cold_start.get(), cold);
    assert!(d
        .apply(&CliConfig::default(), cold)
        .demo
        .cold_start
        .get()
        .is_zero());
    for bad in [
        "8",
        "0x50ms",
        "8x0ms",
        "8x50ms:gpu",
        "x50ms",
        "8xfast",
        "8x50ms+cheap0",
        "8x50ms+cheap95",
        "8x50ms+cheap+cheap30",
        "8x50ms+health+health",
        "8x50ms+warm",
        "8x50ms~3",
        "8x50ms~x",
    ] {
        assert!(bad.parse::<AppSpec>().is_err(), "{bad}");
    }
    for app in MATRIX.split(',') {
        assert!(app.parse::<AppSpec>().is_ok(), "{app}");
    }
    let mixed = c.apply(&CliConfig::default(), cold);
    let [get, post, charges] = MIXED;
    assert_eq!(mixed.demo.times(), [get, post, charges, get, get]);
    assert!((c.traffic(&mixed).mean_service() - 0.029).abs() < 1e-12);
    // The real app: 0.1 × 20 + 0.2 × 20 + 0.7 × (0.5 × 20 + 0.4 × 1 + 0.1 × 300) ms.
    let t = e.traffic(&real);
    assert!(
        (t.mean_service() - 0.03428).abs() < 1e-12,
        "{}",
        t.mean_service()
    );
    assert_eq!(
        (t.health, t.times[Route::Reports as usize]),
        (HEALTH_RATE, 0.3)
    );
}

#[test]
fn the_ramp_counts_refusals_below_0_9c_and_a_cold_start_is_judged_on_its_own_capacity() {
    let phases = [
        Phase {
            name: "0.5C",
            seconds: 10.0,
            load: 0.5,
            load_end: 0.5,
            slow: false,
            mix: super::super::load::MIX,
        },
        Phase {
            name: RAMP,
            seconds: 27.0,
            load: 0.3,
            load_end: 3.0,
            slow: false,
            mix: super::super::load::MIX,
        },
    ];
    // 10 requests of 0.1 s served every second of the ramp: the whole capacity (1 s of
    // work a second, C = 10), and one refusal in seconds 13 (load 0.6C to 0.7C) and 30
    // (2.3C); a third of that before.
    let mut per_second = vec![[SecondTier::default(); 4]; 37];
    for (i, s) in per_second.iter_mut().enumerate() {
        s[2].ok = if i < 10 { 3 } else { 10 };
        s[2].work = f64::from(s[2].ok) / 10.0;
    }
    for s in [13, 30] {
        per_second[s][2].shed = 1;
        per_second[s][2].refused[LimiterName::AdaptiveConcurrency as usize] = 1;
    }
    let reports = vec![PhaseReport::default(); 2];
    let run = |cold| AppRun {
        app: "a",
        capacity: 10.0,
        at_once: 1.0,
        phases: &phases,
        reports: &reports,
        per_second: &per_second,
        mean: 0.1,
        polled: &[],
        health: Some((9, 10)),
        cold,
    };
    let warm = run(false);
    assert_eq!(warm.ramp(), Some((1, Some(0.6))));
    assert!((warm.goodput(0).unwrap() - 0.3).abs() < 1e-12);
    let row = row(&warm);
    assert!(row.contains("| 1, 0.60C | 90.0% |"), "{row}");
    assert!(row.contains("| 0 / – |"), "{row}");
    // A cold start's first phase is judged on the third of the capacity it had.
    let cold = super::row(&run(true));
    assert!(
        cold.contains("| cold (0 refused, goodput 90.0% of C ÷ 3) / – |"),
        "{cold}"
    );
}

#[test]
fn the_halved_phase_is_judged_on_the_workers_the_drop_left() {
    let phases = [Phase {
        name: "halved 1.5C",
        seconds: 30.0,
        load: 1.5,
        load_end: 1.5,
        slow: true,
        mix: super::super::load::MIX,
    }];
    // 5 workers, C = 50 of 0.1 s: half taken away is 2 of them (whole workers), and the 3
    // left are kept busy (30 requests of 0.1 s a second): the whole new capacity, not 120%
    // of a half.
    let mut per_second = vec![[SecondTier::default(); 4]; 30];
    for s in &mut per_second {
        s[2].ok = 30;
        s[2].work = 3.0;
    }
    let reports = vec![PhaseReport::default(); 1];
    let run = AppRun {
        app: "a",
        capacity: 50.0,
        at_once: 5.0,
        phases: &phases,
        reports: &reports,
        per_second: &per_second,
        mean: 0.1,
        polled: &[],
        health: None,
        cold: false,
    };
    let row = row(&run);
    assert!(row.contains("| 100.0% |"), "{row}");
}
