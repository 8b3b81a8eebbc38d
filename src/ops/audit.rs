//! The audit log of admin changes: the last 256, newest last.

use serde::Serialize;
use serde_json::Value;
use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

/// How many changes the log keeps.
pub const CAPACITY: usize = 256;

/// One accepted change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AuditEntry {
    /// When, as RFC 3339 UTC.
    pub time: String,
    /// mode, kill_switch, patch, revert or reload.
    pub action: &'static str,
    /// What it changed, before.
    pub before: Value,
    /// And after.
    pub after: Value,
    /// The settings version it produced.
    pub version: u64,
    /// Who asked: the client address, or `timer` / `signal` (`fleet`: another instance's
    /// change, read from the fleet's settings).
    pub source: String,
    /// The instance the change was made on (`admin.instance`).
    pub instance: String,
}

/// A bounded log.
#[derive(Debug, Default)]
pub struct AuditLog {
    entries: VecDeque<AuditEntry>,
}

impl AuditLog {
    /// Appends, dropping the oldest entry past 256.
    pub fn push(&mut self, entry: AuditEntry) {
        if self.entries.len() == CAPACITY {
            self.entries.pop_front();
        }
        self.entries.push_back(entry);
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.entries.iter().cloned().collect()
    }
}

/// `time` as RFC 3339 UTC with seconds, e.g. `2026-11-22T03:40:00Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
