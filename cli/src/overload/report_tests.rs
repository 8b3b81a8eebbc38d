//! The report's arithmetic on hand-built outcomes.

use super::*;
use crate::overload::load::{Arrival, Path};
use brownout_cli::config::Route;

fn outcome(at: f64, tier: Tier, result: Result) -> Outcome {
    Outcome {
        arrival: Arrival {
            at,
            phase: 0,
            tier,
            key: 0,
            path: Path::Route(Route::GetItems),
            work: 0.05,
        },
        result,
        latency: 0.05,
        attempts: 1,
        limiter: (result == Result::Shed).then_some(LimiterName::WorkerUtilization),
    }
}

#[test]
fn an_inversion_after_a_refusal_is_a_lower_tier_success_sent_after_a_higher_tiers_503() {
    let outcomes = [
        // Second 0: a test request let in before the load was seen, then a GET refused.
        outcome(0.1, Tier::Test, Result::Ok),
        outcome(0.3, Tier::Get, Result::Shed),
        // Second 1: a POST refused, then a GET let in after it.
        outcome(1.2, Tier::Post, Result::Shed),
        outcome(1.5, Tier::Get, Result::Ok),
        // Second 2: only the lowest tier refused, and one timed-out POST: no inversion.
        outcome(2.1, Tier::Get, Result::Ok),
        outcome(2.2, Tier::Test, Result::Shed),
        outcome(2.3, Tier::Post, Result::Timeout),
        // Second 3: a critical request refused after every success was sent.
        outcome(3.1, Tier::Test, Result::Ok),
        outcome(3.9, Tier::Critical, Result::Shed),
    ];
    let per_second = seconds(&outcomes, 4.0);
    let inverted: Vec<[bool; 2]> = per_second
        .iter()
        .map(|s| {
            [
                SecondTier::inverted(s, false),
                SecondTier::inverted(s, true),
            ]
        })
        .collect();
    assert_eq!(
        inverted,
        [[true, false], [true, true], [false, false], [true, false]]
    );
    let phases = [Phase {
        name: "all",
        seconds: 4.0,
        load: 1.0,
        load_end: 1.0,
        slow: false,
        mix: [0.25; 4],
    }];
    // Each success is worth 50 ms: an app serving 50 ms of work a second is served whole.
    let report = phase(&outcomes, &per_second, &phases, 0, 0.05, &[]);
    assert_eq!((report.inversions, report.inversions_after), (3, 1));
    assert_eq!(report.last_critical_refusal, Some(3.9));
    assert_eq!(report.worst_5s, None, "no whole 5 s window in 4 s");
    assert!((report.timeout_share() - 1.0 / 9.0).abs() < 1e-12);
    assert_eq!(report.amplification(), 1.0);
    let table = summary(&[("arm".into(), vec![report.clone()])], &phases);
    assert!(
        table.contains("| arm | all | 100.0% | 0.0% | – | – | 3 | 1 | 4 |"),
        "{table}"
    );
    // Every refusal was worker_utilization's; two of the four came in the second half.
    assert_eq!(report.refused[LimiterName::WorkerUtilization as usize], 4);
    assert_eq!(report.refused_late.iter().sum::<u64>(), 2);
    assert!(
        table.contains("| 0 | 100.0% | – | 11.1% | 3.9 s | 1.00 |"),
        "{table}"
    );
    let csv = crate::overload::csv::csv(&per_second, &[]);
    let header = csv.lines().next().unwrap();
    assert!(header.contains(",refused_by_worker_utilization,"));
    assert!(header.ends_with(",refused_by_other,capacity,service_seconds"));
    let row: Vec<&str> = csv.lines().nth(2).unwrap().split(',').collect();
    let names: Vec<&str> = header.split(',').collect();
    let wu = names
        .iter()
        .position(|n| *n == "refused_by_worker_utilization")
        .unwrap();
    assert_eq!(row[wu], "1", "{csv}");
    assert!(csv.lines().nth(2).unwrap().ends_with(",0,,"), "{csv}");
}
