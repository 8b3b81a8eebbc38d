//! Tests of `control/source.rs`.

use super::*;
use crate::control::InFlightSource;
use std::sync::atomic::Ordering;

#[test]
fn in_flight_is_relative_to_live_capacity() {
    let in_flight = Arc::new(InFlight::default());
    let capacity = Arc::new(std::sync::atomic::AtomicU32::new(4));
    let cap = capacity.clone();
    let mut s = InFlightSource::new(in_flight.clone(), move || {
        Some(f64::from(cap.load(Ordering::Relaxed)))
    });
    assert_eq!(s.sample(Duration::ZERO), Ok(0.0));
    in_flight.enter(Tier::Get);
    in_flight.enter(Tier::Post);
    assert_eq!(s.sample(Duration::ZERO), Ok(0.5));
    capacity.store(8, Ordering::Relaxed);
    assert_eq!(s.sample(Duration::ZERO), Ok(0.25));
    in_flight.leave(Tier::Get);
    assert_eq!(in_flight.per_tier().get, 0);
    assert_eq!(in_flight.total(), 1);
}

#[test]
fn in_flight_reports_the_average_over_the_interval() {
    let in_flight = Arc::new(InFlight::default());
    let mut s = InFlightSource::new(in_flight.clone(), || Some(8.0));
    let at = |ms: u64| Duration::from_millis(ms);
    assert_eq!(s.sample(at(0)), Ok(0.0));
    // 8 requests (full) for the first quarter of an 8 s interval, then none.
    for _ in 0..8 {
        in_flight.enter(Tier::Get);
    }
    s.observe(at(10));
    for step in 1..200 {
        s.observe(at(10 * step));
    }
    for _ in 0..8 {
        in_flight.leave(Tier::Get);
    }
    for step in 200..800 {
        s.observe(at(10 * step));
    }
    let u = s.sample(at(8_000)).unwrap();
    assert!((u - 0.25).abs() < 0.01, "{u}");
}

#[test]
fn a_closure_source_averages_its_readings_and_skips_errors() {
    let reading = Arc::new(std::sync::Mutex::new(Ok(1.0)));
    let r = reading.clone();
    let mut s = source_fn("pool", move || r.lock().unwrap().clone());
    let at = Duration::from_secs;
    assert_eq!(s.sample(at(0)), Ok(1.0));
    s.observe(at(1));
    *reading.lock().unwrap() = Err(SourceError("pool closed".into()));
    s.observe(at(2)); // left out
    assert!(s.sample(at(3)).is_err());
    *reading.lock().unwrap() = Ok(0.0);
    s.observe(at(4));
    // 1 for the first second, then 0 (the error left no reading in between).
    assert_eq!(s.sample(at(4)), Ok(0.25));
}

#[test]
fn combine_takes_the_max_of_finite_answers() {
    assert_eq!(combine([0.2, 0.9, 0.5]), Some(0.9));
    assert_eq!(combine([0.2, f64::NAN]), Some(0.2));
    assert_eq!(combine([3.0]), Some(3.0), "how far over capacity");
    assert_eq!(combine([-1.0]), Some(0.0));
    assert_eq!(combine(std::iter::empty()), None);
}

#[test]
fn fn_source_reports_its_closure() {
    let mut s = source_fn("pool", || Ok(0.4));
    assert_eq!(s.name(), "pool");
    assert_eq!(s.sample(Duration::ZERO), Ok(0.4));
}

#[test]
#[cfg(feature = "cpu")]
fn cpu_source_measures_a_busy_thread() {
    let mut s = CpuSource::new().unwrap();
    let start = std::time::Instant::now();
    assert_eq!(s.sample(Duration::ZERO), Ok(0.0));
    // Burn CPU on this thread for a while, then compare with the wall time.
    let mut x = 0u64;
    while start.elapsed() < Duration::from_millis(300) {
        x = x.wrapping_mul(31).wrapping_add(7);
    }
    std::hint::black_box(x);
    let u = s.sample(start.elapsed()).unwrap();
    // A broken reading is ~0; a loaded machine may give this thread only part of a core.
    assert!(u > 0.05, "cpu share {u}");
    assert!(u <= 1.05, "cpu share {u}");
}

#[test]
fn runtime_source_measures_busy_workers() {
    let registry = Arc::new(RuntimeRegistry::default());
    let mut s = RuntimeSource::new(registry.clone());
    assert!(s.sample(Duration::ZERO).is_err(), "no runtime yet");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let wall = std::time::Instant::now();
    rt.block_on(async {
        registry.register_current();
        registry.register_current(); // once per thread
    });
    assert_eq!(s.sample(wall.elapsed()), Ok(0.0), "baseline");
    rt.block_on(async {
        // A task that keeps the worker busy without yielding.
        tokio::spawn(async {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(200) {
                std::hint::spin_loop();
            }
        })
        .await
        .unwrap();
    });
    let u = s.sample(wall.elapsed()).unwrap();
    assert!(u > 0.5 && u <= 1.0, "busy ratio {u}");
}
