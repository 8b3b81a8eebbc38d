use super::*;

#[test]
fn retry_after_rounds_up_to_at_least_one() {
    assert_eq!(retry_after_secs(Duration::ZERO), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
    assert_eq!(retry_after_secs(Duration::from_secs(8)), 8);
    assert_eq!(retry_after_secs(Duration::from_millis(8001)), 9);
}
