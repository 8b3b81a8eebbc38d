//! Tests of `ops/persist.rs`.

use super::*;
use serde_json::json;

#[test]
fn round_trips_and_reports_corruption() {
    let dir = std::env::temp_dir().join(format!("brownout-persist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("overrides.json");
    assert_eq!(load(&path), Ok(None));
    let o = Overrides {
        patch: Some(json!({"worker_utilization": {"mode": "dark"}})),
        kill_switch: true,
        reverts: vec![PendingRevert {
            limiter: "request_rate".into(),
            mode: crate::config::Mode::Enforce,
            at_unix_ms: 42,
        }],
        version: 5,
    };
    save(&path, &o).unwrap();
    assert_eq!(load(&path), Ok(Some(o)));
    std::fs::write(&path, b"{not json").unwrap();
    let err = load(&path).unwrap_err();
    assert!(err.contains("not a valid overrides file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Reads the file as it was written; `Ok(None)` when it does not exist. (At start,
/// `restore` reads it member by member instead, keeping what holds.)
fn load(path: &Path) -> Result<Option<Overrides>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{} is not a valid overrides file: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}
