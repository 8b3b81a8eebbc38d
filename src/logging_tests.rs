use super::*;

#[test]
fn one_message_per_period_with_a_count_of_the_rest() {
    let gate = LogGate::new(Duration::from_secs(10));
    assert_eq!(gate.open(Duration::from_secs(0)), Some(0));
    assert_eq!(gate.open(Duration::from_secs(1)), None);
    assert_eq!(gate.open(Duration::from_secs(9)), None);
    assert_eq!(gate.open(Duration::from_secs(10)), Some(2));
    assert_eq!(gate.open(Duration::from_secs(11)), None);
}
