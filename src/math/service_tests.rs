//! The service times' tests: per class and tier, samples and their quantile, probes.

use super::*;
use crate::rng::SplitMix64;
use crate::route_class::on_one_route;

const MS: u64 = 1000;

/// Class `route`'s index in `tier` (`Tier::index` order).
fn class(route: usize, tier: usize) -> usize {
    route * 4 + tier
}

#[test]
fn each_tier_keeps_its_own_service_time() {
    let mut s = ServiceFloor::default();
    // Charges of 200 ms beside GETs of 10 ms: each tier its own.
    for i in 1..=40 {
        s.add(
            i * 250 * MS,
            &on_one_route([4, 0, 32, 0]),
            &on_one_route([800 * MS, 0, 320 * MS, 0]),
            0,
        );
    }
    assert_eq!(s.floors(), [Some(200 * MS), None, Some(10 * MS), None]);
    assert_eq!(
        s.mean_for(&on_one_route([1, 0, 3, 0])),
        Some((230 * MS) as f64 / 4.0)
    );
    // The POST tier, never seen, counts at the mean of the known ones.
    assert_eq!(
        s.mean_for(&on_one_route([0, 1, 0, 0])),
        Some((105 * MS) as f64)
    );
}

#[test]
fn a_window_is_judged_by_its_own_mix_of_routes() {
    // GETs to a route answered at once (20 µs) beside GETs of 100 ms, the cheap share
    // moving from 0 to 60% from window to window, a dozen requests each: every window's
    // mean is what its mix should take, none reads as a queue.
    let mut s = ServiceFloor::default();
    let mut rng = SplitMix64::new(7);
    let (cheap, slow) = (class(0, 2), class(1, 2));
    let mut worst: f64 = 1.0;
    for i in 1..=400u64 {
        let mut count = [0; CLASSES];
        let mut sum = [0; CLASSES];
        let share = 0.6 * rng.next_f64();
        for _ in 0..12 {
            let c = if rng.next_f64() < share { cheap } else { slow };
            count[c] += 1;
            sum[c] += if c == cheap { 20 } else { 100 * MS };
        }
        if i > 20 {
            let mean = (sum[cheap] + sum[slow]) as f64 / 12.0;
            let expected = s.mean_for(&count).unwrap();
            worst = worst.max(mean / expected).max(expected / mean);
        }
        s.add(
            i * 300 * MS,
            &count,
            &sum,
            (i * 300 * MS).saturating_sub(30_000 * MS),
        );
    }
    assert!(
        worst < 1.01,
        "a window read {worst} times what its mix takes"
    );
    // The tier's service time is its routes' by their requests (about 30% cheap).
    let get = s.floors()[2].unwrap() as f64;
    assert!((55.0..85.0).contains(&(get / MS as f64)), "{get}");
}

#[test]
fn log_normal_times_are_pooled_into_samples_whose_low_quantile_is_near_the_mean() {
    // One request per window, log-normal (σ 0.6): the 0.2 quantile of single requests
    // is about half their mean; of samples of 48, within a tenth of it.
    let mut s = ServiceFloor::default();
    let mut rng = SplitMix64::new(11);
    let (mut total, mut n) = (0.0, 0.0);
    for i in 1..=3000u64 {
        let z = rng.next_normal();
        let us = (20_000.0 * (0.6 * z).exp()) as u64;
        (total, n) = (total + us as f64, n + 1.0);
        let (mut count, mut sum) = ([0; CLASSES], [0; CLASSES]);
        count[class(0, 2)] = 1;
        sum[class(0, 2)] = us;
        s.add(i * 10 * MS, &count, &sum, 0);
    }
    let ratio = s.floors()[2].unwrap() as f64 / (total / n);
    assert!((0.88..1.0).contains(&ratio), "{ratio}");
}

#[test]
fn a_burst_of_instant_answers_on_a_route_sits_below_the_quantile() {
    let mut s = ServiceFloor::default();
    for i in 1..=40 {
        s.add(
            i * 250 * MS,
            &on_one_route([0, 0, 32, 0]),
            &on_one_route([0, 0, 320 * MS, 0]),
            0,
        );
    }
    // An attacker's burst of requests on the same route answered at once.
    for i in 41..=43 {
        s.add(
            i * 250 * MS,
            &on_one_route([0, 0, 50, 0]),
            &on_one_route([0, 0, 500, 0]),
            0,
        );
    }
    let floor = s.floors()[2].unwrap() as f64;
    assert!(floor >= 0.95 * (10 * MS) as f64, "{floor}");
}

#[test]
fn old_samples_age_out_but_a_class_keeps_its_newest() {
    let mut s = ServiceFloor::default();
    let get = |n: u64, ms: u64| on_one_route([0, 0, n * ms * MS, 0]);
    s.add(250 * MS, &on_one_route([0, 0, 64, 0]), &get(64, 50), 0);
    s.add(
        60_000 * MS,
        &on_one_route([0, 64, 0, 0]),
        &on_one_route([0, 64 * 100 * MS, 0, 0]),
        30_000 * MS,
    );
    assert_eq!(s.floors()[2], Some(50 * MS), "kept: nothing newer");
    s.add(
        61_000 * MS,
        &on_one_route([0, 0, 64, 0]),
        &get(64, 60),
        31_000 * MS,
    );
    assert_eq!(s.floors()[2], Some(60 * MS), "the old one aged out");
}

#[test]
fn until_a_whole_sample_a_class_is_the_mean_of_what_it_has() {
    let mut s = ServiceFloor::default();
    s.add(
        250 * MS,
        &on_one_route([0, 0, 3, 0]),
        &on_one_route([0, 0, 90 * MS, 0]),
        0,
    );
    assert_eq!(s.floors()[2], Some(30 * MS));
    s.add(
        350 * MS,
        &on_one_route([0, 0, 1, 0]),
        &on_one_route([0, 0, 70 * MS, 0]),
        0,
    );
    assert_eq!(s.floors()[2], Some(40 * MS));
}

/// The first requests of a route to finish are its fastest: until `WARMUP` times their mean
/// has passed since the first finished, they are a warm-up, the class is not settled, and
/// then they are dropped and the class is learned afresh.
#[test]
fn a_class_first_requests_are_a_warm_up_dropped_once_it_is_over() {
    let mut s = ServiceFloor::default();
    let c = class(0, 2);
    s.add(
        250 * MS,
        &on_one_route([0, 0, 20, 0]),
        &on_one_route([0, 0, 20 * 30 * MS, 0]),
        0,
    );
    assert_eq!(s.floors()[2], Some(30 * MS));
    assert!(!s.settled(c), "20 requests, but in the warm-up");
    // 110 ms after the first: still the warm-up (four times 30 ms), pooled.
    s.add(
        360 * MS,
        &on_one_route([0, 0, 20, 0]),
        &on_one_route([0, 0, 20 * 50 * MS, 0]),
        0,
    );
    assert_eq!(s.floors()[2], Some(40 * MS));
    assert!(!s.settled(c));
    // Past it: what the warm-up pooled is dropped, the class is what came since.
    s.add(
        500 * MS,
        &on_one_route([0, 0, 20, 0]),
        &on_one_route([0, 0, 20 * 60 * MS, 0]),
        0,
    );
    assert_eq!(s.floors()[2], Some(60 * MS));
    assert!(s.settled(c), "20 requests since the warm-up");
    // A probe's measure needs no warm-up.
    let mut p = ServiceFloor::default();
    p.reset(
        250 * MS,
        (
            &on_one_route([0, 0, 20, 0]),
            &on_one_route([0, 0, 20 * 30 * MS, 0]),
        ),
        1.0,
        0.0,
    );
    assert!(p.settled(c));
}

#[test]
fn a_probe_replaces_the_floors_and_scales_the_classes_it_did_not_see() {
    let mut s = ServiceFloor::default();
    s.add(
        250 * MS,
        &on_one_route([1, 0, 10, 0]),
        &on_one_route([200 * MS, 0, 100 * MS, 0]),
        0,
    );
    // The server got twice as slow: the probe saw GETs only.
    s.reset(
        500 * MS,
        (
            &on_one_route([0, 0, 4, 0]),
            &on_one_route([0, 0, 80 * MS, 0]),
        ),
        2.0,
        0.0,
    );
    assert_eq!(s.floors(), [Some(400 * MS), None, Some(20 * MS), None]);
}

#[test]
fn a_tier_that_stops_coming_keeps_the_mix_it_had() {
    // GETs: 40 cache hits of 1 ms for every 10 reports of 300 ms (a tier's time of 60.8 ms),
    // then a minute in which no GET comes (the controller sheds the tier) while charges keep
    // the samples ageing: the GETs' time stays what their mix costs. Weighted by the requests
    // behind each floor instead (a class keeps its last sample), the rare dear route came to
    // weigh as much as the cheap one: 150 ms.
    let mut s = ServiceFloor::default();
    let (hit, report, charge) = (class(0, 2), class(1, 2), class(0, 0));
    let mut at = 0;
    for _ in 0..60 {
        at += 1_000 * MS;
        let (mut count, mut sum) = ([0; CLASSES], [0; CLASSES]);
        (count[hit], sum[hit]) = (40, 40 * MS);
        (count[report], sum[report]) = (10, 3_000 * MS);
        s.add(at, &count, &sum, at.saturating_sub(30_000 * MS));
    }
    let get = |s: &ServiceFloor| s.floors()[2].unwrap() as f64 / MS as f64;
    assert!((get(&s) - 60.8).abs() < 1.0, "{}", get(&s));
    for _ in 0..60 {
        at += 1_000 * MS;
        let (mut count, mut sum) = ([0; CLASSES], [0; CLASSES]);
        (count[charge], sum[charge]) = (50, 1_000 * MS);
        s.add(at, &count, &sum, at.saturating_sub(30_000 * MS));
    }
    assert!((get(&s) - 60.8).abs() < 1.0, "{}", get(&s));
}

#[test]
fn the_spread_of_a_mix_is_its_squared_coefficient_of_variation_across_classes() {
    let mut s = ServiceFloor::default();
    assert_eq!(s.spread(), 0.0, "nothing learned");
    // One time on every route: no spread, however many routes.
    let mut count = [0; CLASSES];
    let mut sum = [0; CLASSES];
    (count[class(0, 2)], sum[class(0, 2)]) = (48, 48 * 20 * MS);
    (count[class(1, 2)], sum[class(1, 2)]) = (48, 48 * 20 * MS);
    s.add(250 * MS, &count, &sum, 0);
    assert!(s.spread().abs() < 1e-9, "{}", s.spread());
    // 300 ms reports, a tenth of the requests, beside 1 ms cache hits: (0.9 × 1 + 0.1 × 300²)
    // / (0.9 × 1 + 0.1 × 300)² − 1.
    let mut s = ServiceFloor::default();
    let mut count = [0; CLASSES];
    let mut sum = [0; CLASSES];
    (count[class(0, 2)], sum[class(0, 2)]) = (432, 432 * MS);
    (count[class(1, 2)], sum[class(1, 2)]) = (48, 48 * 300 * MS);
    s.add(250 * MS, &count, &sum, 0);
    let mean = 0.9 + 0.1 * 300.0;
    let expected = (0.9 + 0.1 * 300.0 * 300.0) / (mean * mean) - 1.0;
    assert!(
        (s.spread() - expected).abs() < 1e-6,
        "{} vs {expected}",
        s.spread()
    );
}
