//! Tests of `ops/audit.rs`.

use super::*;
use std::time::Duration;

#[test]
fn formats_utc_dates() {
    let at = |s: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
    assert_eq!(at(0), "1970-01-01T00:00:00Z");
    assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(at(1_795_318_800), "2026-11-22T03:40:00Z");
}

#[test]
fn keeps_the_last_256() {
    let mut log = AuditLog::default();
    for version in 0..300 {
        log.push(AuditEntry {
            time: String::new(),
            action: "mode",
            before: Value::Null,
            after: Value::Null,
            version,
            source: String::new(),
            instance: String::new(),
        });
    }
    let entries = log.entries();
    assert_eq!(entries.len(), CAPACITY);
    assert_eq!(entries[0].version, 44);
    assert_eq!(entries[255].version, 299);
}
