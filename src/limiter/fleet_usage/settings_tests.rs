use crate::config::{refused, Config};

#[test]
fn reserved_share_is_below_one_and_rounds_the_limit_down() {
    let e = refused("limiters:\n  fleet_usage:\n    reserved_for_critical: 1.0\n");
    assert!(
        e.starts_with("limiters.fleet_usage.reserved_for_critical"),
        "{e}"
    );
    let ok = Config::from_yaml_str(
        "limiters:\n  fleet_usage:\n    capacity: 10\n    reserved_for_critical: 0.2\n",
    )
    .unwrap();
    assert_eq!(ok.limiters.fleet_usage.non_critical_limit(), 8);
}
