//! Tests of `ops/operator/fleet.rs`.

use super::*;

#[test]
fn an_instance_keeps_what_it_sized_at_start() {
    let mut own = crate::config::LimitersConfig::default();
    own.request_rate.max_keys = 5_000;
    own.worker_utilization.sources = vec![crate::config::SourceKind::InFlight];
    let mut fleet = crate::config::LimitersConfig::default();
    fleet.request_rate.rate = 77.0;
    fleet.keep_sized_at_start(&own);
    assert_eq!(fleet.request_rate.max_keys, 5_000);
    assert_eq!(
        fleet.worker_utilization.sources,
        own.worker_utilization.sources
    );
    assert_eq!(fleet.request_rate.rate, 77.0, "the rest is the fleet's");
}

#[test]
fn audit_actions_come_from_a_fixed_set() {
    assert_eq!(action("kill_switch"), "kill_switch");
    assert_eq!(action("revert"), "revert");
    assert_eq!(action("<script>"), "fleet");
}
