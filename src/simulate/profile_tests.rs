//! Tests of `simulate/profile.rs`.

use super::*;

#[test]
fn every_built_in_profile_exists_and_the_scorecard_has_the_benchmarks_phases() {
    for (name, _) in BUILT_IN {
        assert!(built_in(name).is_some(), "{name}");
    }
    let s = built_in("scorecard").unwrap();
    // bench overload's scorecard: the same loads, lengths and capacity drop.
    let shape: Vec<(f64, f64, f64)> = s.iter().map(|p| (p.from, p.seconds, p.slowdown)).collect();
    assert_eq!(
        shape,
        [
            (0.5, 60.0, 1.0),
            (0.75, 180.0, 1.0),
            (2.0, 240.0, 1.0),
            (4.0, 60.0, 1.0),
            (0.3, 300.0, 1.0),
            (1.5, 120.0, 2.0),
            (1.5, 60.0, 1.0)
        ]
    );
    assert!(built_in("nope").is_none());
}

#[test]
fn a_trace_reads_rows_and_names_the_bad_line() {
    let t = parse_trace("critical,post,get,test\n# warm\n1,2,3,4\n\n0,0,10.5,0\n").unwrap();
    assert_eq!(t, vec![[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 10.5, 0.0]]);
    let e = parse_trace("1,2,3\n").unwrap_err();
    assert!(e.starts_with("line 1: want 4 columns"), "{e}");
    let e = parse_trace("1,2,3,4\n1,2,x,4\n").unwrap_err();
    assert!(e.starts_with("line 2: \"x\""), "{e}");
    assert!(parse_trace("1,2,-3,4").is_err());
    assert!(parse_trace("# nothing\n").is_err());
}

#[test]
fn compressing_keeps_at_least_a_second() {
    let mut s = built_in("spike").unwrap();
    compress(&mut s, 60.0);
    let secs: Vec<f64> = s.iter().map(|p| p.seconds).collect();
    assert_eq!(secs, [1.0, 1.0, 5.0]);
}
