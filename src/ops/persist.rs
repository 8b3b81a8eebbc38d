//! The overrides file: admin changes written atomically (temp file, fsync, rename) as a merge
//! patch over config.yaml's limiter settings, re-applied at start.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::Path;

/// What the file holds. The kill switch and the version are written first: a file cut short
/// still says them ([`super::restore`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    /// Whether the kill switch is engaged.
    #[serde(default)]
    pub kill_switch: bool,
    /// The settings version these are: a restart goes on from it, so an `If-Match` read
    /// before the restart never matches other settings after it (0: a file from before
    /// versions were kept).
    #[serde(default)]
    pub version: u64,
    /// Merge patch from config.yaml's `limiters` to the live ones (`null`: none).
    #[serde(default)]
    pub patch: Option<Value>,
    /// Temporary mode changes still to be reverted.
    #[serde(default)]
    pub reverts: Vec<PendingRevert>,
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

/// The file beside `path` that keeps the highest settings version issued: the version's
/// record even when the overrides file is lost.
pub fn version_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".version");
    path.with_file_name(name)
}

/// The highest version issued, from [`version_path`] (`None`: no such file, or not a number).
pub fn load_version(path: &Path) -> Option<u64> {
    std::fs::read_to_string(version_path(path))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Records `version` as issued, atomically.
pub fn save_version(path: &Path, version: u64) -> std::io::Result<()> {
    write_atomically(&version_path(path), format!("{version}\n").as_bytes())
}

/// Writes the file atomically: a reader sees the old file or the new one, never a mix. The
/// version file is written first: a version the overrides file names is always recorded.
pub fn save(path: &Path, overrides: &Overrides) -> std::io::Result<()> {
    save_version(path, overrides.version)?;
    let body = serde_json::to_vec_pretty(overrides).map_err(std::io::Error::other)?;
    write_atomically(path, &body)
}

/// Writes `body` to `path` through a temporary file, fsync and rename.
fn write_atomically(path: &Path, body: &[u8]) -> std::io::Result<()> {
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
        file.write_all(body)?;
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
#[path = "persist_tests.rs"]
mod tests;
