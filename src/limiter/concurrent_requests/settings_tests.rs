use crate::config::refused;

#[test]
fn max_in_flight_is_at_least_one() {
    let e = refused("limiters:\n  concurrent_requests:\n    max_in_flight: 0\n");
    assert!(
        e.starts_with("limiters.concurrent_requests.max_in_flight"),
        "{e}"
    );
}
