//! The overrides file: admin changes written atomically (temp file, fsync, rename) as a merge
//! patch over config.yaml's limiter settings, re-applied at start.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::Path;

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    /// Merge patch from config.yaml's `limiters` to the live ones (`null`: none).
    #[serde(default)]
    pub patch: Option<Value>,
    /// Whether the kill switch is engaged.
    #[serde(default)]
    pub kill_switch: bool,
    /// Temporary mode changes still to be reverted.
    #[serde(default)]
    pub reverts: Vec<PendingRevert>,
    /// The settings version these are: a restart goes on from it, so an `If-Match` read
    /// before the restart never matches other settings after it (0: a file from before
    /// versions were kept).
    #[serde(default)]
    pub version: u64,
}

/// A temporary mode change's revert, by wall-clock time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingRevert {
    /// The limiter.
    pub limiter: String,
    /// The mode to go back to.
    pub mode: crate::config::Mode,
    /// When, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

/// Reads the file; `Ok(None)` when it does not exist.
pub fn load(path: &Path) -> Result<Option<Overrides>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{} is not a valid overrides file: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Writes the file atomically: a reader sees the old file or the new one, never a mix.
pub fn save(path: &Path, overrides: &Overrides) -> std::io::Result<()> {
    let body = serde_json::to_vec_pretty(overrides).map_err(std::io::Error::other)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "overrides".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&body)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    // Make the rename itself durable where the platform allows it.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
}
