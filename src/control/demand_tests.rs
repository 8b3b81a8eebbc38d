//! Unit tests of `demand.rs`.

use super::*;

/// All in the GET tier.
fn interval(reached: u64, shed: u64, admitted: u64) -> Traffic {
    Traffic {
        reached: [0, 0, reached, 0],
        shed: [0, 0, shed, 0],
        admitted,
    }
}

fn every_tier(s: f64) -> [Option<f64>; 4] {
    [Some(s); 4]
}

#[test]
fn twice_the_capacity_reads_two_whatever_the_fast_guard_let_in() {
    // 8 workers, 50 ms a request: 160/s is capacity. At 320/s for 8 s the fast guard let
    // in 1,280 and refused as many: 2,560 requests × 50 ms over 8 s = 16 in flight.
    let work = offered_work(interval(2_560, 0, 1_280), 8.0, 10.0, every_tier(0.05)).unwrap();
    assert!((work / 8.0 - 2.0).abs() < 1e-9, "{work}");
    // At half the capacity nothing is refused: 4 in flight.
    let calm = offered_work(interval(640, 0, 640), 8.0, 4.0, every_tier(0.05)).unwrap();
    assert!((calm / 8.0 - 0.5).abs() < 1e-9, "{calm}");
}

#[test]
fn what_the_controller_shed_is_its_feedback_and_is_shown_added_back() {
    // Of 2,560 that reached it the controller shed 1,280: its input is what is left (1),
    // the operator's reading the whole demand (2).
    let i = interval(2_560, 1_280, 1_280);
    let input = offered_work(i, 8.0, 8.0, every_tier(0.05)).unwrap() / 8.0;
    assert!((input - 1.0).abs() < 1e-9, "{input}");
    assert!((with_shed(input, i, every_tier(0.05)) - 2.0).abs() < 1e-9);
    // No service time known: by requests, the same here.
    assert!((with_shed(input, i, [None; 4]) - 2.0).abs() < 1e-9);
    // Nothing passed: nothing to scale by.
    assert_eq!(with_shed(0.3, interval(10, 10, 0), every_tier(0.05)), 0.3);
}

#[test]
fn shed_cheap_requests_add_back_their_work_not_their_number() {
    // simulate's mixed app at twice its capacity (5 workers, 4.3 learned), over 8 s: 284
    // critical requests of 20 ms, 526 POSTs of 88 ms (53 shed), 1,680 GETs of 10 ms and 574
    // tests of 13 ms, all shed. What passed is 5.9 requests in flight, 1.37 times the
    // capacity; what reached the controller 9.5, 2.2 times. By their number, the shed GETs
    // and tests made it read 5.5.
    let i = Traffic {
        reached: [284, 526, 1_680, 574],
        shed: [0, 53, 1_680, 574],
        admitted: 757,
    };
    let service = [Some(0.020), Some(0.088), Some(0.010), Some(0.013)];
    let input = offered_work(i, 8.0, 5.0, service).unwrap() / 4.3;
    assert!((input - 1.375).abs() < 0.01, "{input}");
    let demand = with_shed(input, i, service);
    let whole = (284.0 * 0.020 + 526.0 * 0.088 + 1_680.0 * 0.010 + 574.0 * 0.013) / 8.0 / 4.3;
    assert!((demand - whole).abs() < 1e-9, "{demand} vs {whole}");
    assert!((2.2..2.25).contains(&demand), "{demand}");
    // A tier not yet seen counts at the mean of the others, as in the input.
    let unseen = [Some(0.020), Some(0.088), None, Some(0.013)];
    let mean = (0.020 + 0.088 + 0.013) / 3.0;
    let input = offered_work(i, 8.0, 5.0, unseen).unwrap() / 4.3;
    let reached = 284.0 * 0.020 + 526.0 * 0.088 + 1_680.0 * mean + 574.0 * 0.013;
    let passed = 284.0 * 0.020 + 473.0 * 0.088;
    let demand = with_shed(input, i, unseen);
    assert!((demand - input * reached / passed).abs() < 1e-9, "{demand}");
}

#[test]
fn without_a_service_time_the_mean_time_in_the_app_stands_for_it() {
    // 6 in flight on average over 8 s with 960 let in: 50 ms each (Little's law). 480
    // more were refused by the fast guard: they count for as long.
    let work = offered_work(interval(1_440, 0, 960), 8.0, 6.0, [None; 4]).unwrap();
    assert!((work - 9.0).abs() < 1e-9, "{work}");
    // Nothing let in and no service time: unknown.
    assert_eq!(offered_work(interval(5, 0, 0), 8.0, 0.0, [None; 4]), None);
    assert_eq!(offered_work(interval(5, 0, 5), 0.0, 1.0, [None; 4]), None);
}

#[test]
fn each_tier_counts_for_its_own_service_time() {
    // Over 4 s: 40 charges of 200 ms, 400 GETs of 10 ms, and 100 POSTs of a tier not
    // yet seen (counted at the mean of the known ones, 105 ms).
    let i = Traffic {
        reached: [40, 100, 400, 0],
        shed: [0; 4],
        admitted: 540,
    };
    let work = offered_work(i, 4.0, 0.0, [Some(0.2), None, Some(0.01), None]).unwrap();
    assert!((work - (8.0 + 10.5 + 4.0) / 4.0).abs() < 1e-9, "{work}");
}

#[test]
fn an_unknown_capacity_reads_zero_and_a_known_one_reads_demand() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let in_flight = Arc::new(InFlight::default());
    let learned = Arc::new(AtomicU64::new(0));
    let (cap, counts) = (learned.clone(), Arc::new(AtomicU64::new(0)));
    let c2 = counts.clone();
    let mut s = InFlightSource::new(in_flight, move || {
        let c = f64::from_bits(cap.load(Ordering::Relaxed));
        (c > 0.0).then_some(c)
    })
    .with_traffic(
        move || interval(c2.load(Ordering::Relaxed), 0, c2.load(Ordering::Relaxed)),
        || [Some(Duration::from_millis(50)); 4],
    );
    s.sample(Duration::ZERO).unwrap();
    counts.store(2_560, Ordering::Relaxed);
    assert_eq!(
        s.sample(Duration::from_secs(8)).unwrap(),
        0.0,
        "not known yet"
    );
    learned.store(8f64.to_bits(), Ordering::Relaxed);
    counts.store(5_120, Ordering::Relaxed);
    let u = s.sample(Duration::from_secs(16)).unwrap();
    assert!((u - 2.0).abs() < 1e-9, "{u}");
}
