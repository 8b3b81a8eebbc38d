//! Tests of `schema/duration.rs`.

use super::*;

#[test]
fn parses_units() {
    let p = |s: &str| s.parse::<HumanDuration>().unwrap().get();
    assert_eq!(p("250ms"), Duration::from_millis(250));
    assert_eq!(p("8s"), Duration::from_secs(8));
    assert_eq!(p("1.5s"), Duration::from_millis(1500));
    assert_eq!(p("2m"), Duration::from_secs(120));
    assert_eq!(p("1h"), Duration::from_secs(3600));
    assert_eq!(p("1d"), Duration::from_secs(86_400));
}

#[test]
fn refuses_garbage() {
    for bad in ["", "8", "s", "8 parsecs", "-1s", "1.2.3s", "ms"] {
        assert!(bad.parse::<HumanDuration>().is_err(), "{bad:?} parsed");
    }
}

#[test]
fn displays_in_the_largest_exact_unit() {
    let show = |d: Duration| HumanDuration(d).to_string();
    assert_eq!(show(Duration::from_secs(120)), "2m");
    assert_eq!(show(Duration::from_secs(8)), "8s");
    assert_eq!(show(Duration::from_millis(1500)), "1500ms");
    assert_eq!(show(Duration::from_millis(5)), "5ms");
    assert_eq!(show(Duration::ZERO), "0ms");
}

#[test]
fn round_trips_through_display() {
    for s in ["5ms", "8s", "2m", "1h", "1d", "1500ms"] {
        assert_eq!(s.parse::<HumanDuration>().unwrap().to_string(), s);
    }
}
