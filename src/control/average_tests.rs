//! Tests of `control/average.rs`.

use super::*;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn the_average_weighs_each_reading_by_the_time_it_stood_for() {
    let mut a = TimeAverage::default();
    a.observe(ms(0), 0.0);
    // 8 in flight for 100 ms, then 0 for 300 ms: 2 on average over 400 ms.
    a.observe(ms(100), 8.0);
    a.observe(ms(250), 0.0);
    assert_eq!(a.take(ms(400), 0.0), 2.0);
    // The next interval starts where the last one ended.
    assert_eq!(a.take(ms(500), 4.0), 4.0);
}

#[test]
fn with_no_time_elapsed_the_reading_is_the_average() {
    let mut a = TimeAverage::default();
    assert_eq!(a.take(ms(7), 3.0), 3.0);
    assert_eq!(a.take(ms(7), 5.0), 5.0);
    // A clock that jumps ahead takes the reading at the jump for the whole interval.
    a.observe(ms(7), 1.0);
    assert_eq!(a.take(ms(8_007), 6.0), 6.0);
}

#[test]
fn a_step_inside_an_interval_counts_for_its_share() {
    // A queue of 16 that builds up three quarters into an 8 s interval read every 10 ms.
    let mut a = TimeAverage::default();
    for i in 0..=800u64 {
        let value = if i > 600 { 16.0 } else { 0.0 };
        a.observe(ms(i * 10), value);
    }
    let average = a.take(ms(8_000), 16.0);
    assert!((average - 4.0).abs() < 1e-9, "{average}");
}

#[test]
fn bad_readings_and_a_clock_going_back_do_not_poison_it() {
    let mut a = TimeAverage::default();
    a.observe(ms(0), 1.0);
    a.observe(ms(100), f64::NAN);
    a.observe(ms(50), 9.0); // earlier than the last reading: no time, no weight
    assert_eq!(a.take(ms(200), 1.0), 0.5);
}
