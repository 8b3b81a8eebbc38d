//! Tests of `simulate/settings.rs`.

use super::*;

fn sets(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn settings_apply_like_a_patch() {
    let mut c = Config::default();
    let killed = apply(
        &mut c,
        &sets(&[
            "limiters.worker_utilization.start_of_bad=0.95",
            "limiters.worker_utilization.mode=dark",
            "limiters.worker_utilization.sample_interval=2s",
        ]),
    )
    .unwrap();
    let wu = &c.limiters.worker_utilization;
    assert_eq!(wu.start_of_bad, 0.95);
    assert_eq!(wu.mode, crate::config::Mode::Dark);
    assert_eq!(wu.sample_interval.get(), std::time::Duration::from_secs(2));
    assert!(!killed);
    assert!(apply(&mut c, &sets(&["kill_switch=true"])).unwrap());
}

#[test]
fn a_bad_setting_names_its_key_and_changes_nothing() {
    let mut c = Config::default();
    let before = c.limiters.clone();
    let bad = [
        (
            "limiters.worker_utilization.start_of_bad=0.5",
            "limiters.worker_utilization",
        ),
        (
            "limiters.worker_utilization.start_of_bad=lots",
            "limiters.worker_utilization.start_of_bad",
        ),
        (
            "limiters.worker_utilization.nope=1",
            "limiters.worker_utilization",
        ),
        ("worker_utilization.mode=off", "worker_utilization"),
        (
            "limiters.worker_utilization.mode",
            "limiters.worker_utilization.mode",
        ),
    ];
    for (set, key) in bad {
        let e = apply(
            &mut c,
            &sets(&["limiters.worker_utilization.end_of_good=0.6", set]),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with(key), "{set}: {e}");
    }
    assert_eq!(c.limiters, before);
}
