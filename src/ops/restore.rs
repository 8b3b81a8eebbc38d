//! The overrides file read back at start. Every acknowledged change that still holds is
//! kept, key by key; what no longer holds (a value config.yaml's new neighbours refuse, an
//! unknown field, a file cut short) is dropped by name, never silently, and the file it came
//! from is set aside for the operator, never overwritten; an engaged kill switch survives any
//! bad neighbour; and the version goes on from the highest ever issued, so that an `If-Match`
//! read before the restart can only match the settings it was read from.

use super::persist::{self, PendingRevert};
use super::{limiters_from_json, patch};
use crate::config::LimitersConfig;
use crate::limiter::LimiterName;
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// What the file gives the settings at start.
#[derive(Debug, Clone)]
pub(crate) struct Restored {
    /// config.yaml's limiters with every override that holds applied.
    pub limiters: LimitersConfig,
    /// Whether the kill switch is engaged.
    pub kill_switch: bool,
    /// Temporary mode changes still to be reverted.
    pub reverts: Vec<PendingRevert>,
    /// The version to start at: the highest issued, one more if anything was dropped (the
    /// settings are not those it named), at least 1.
    pub version: u64,
    /// What was acknowledged and is not in force.
    pub report: RestoreReport,
}

/// What restoring the file dropped, for the log, `/v1/state` and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RestoreReport {
    /// Each override dropped, by key.
    pub dropped: Vec<Dropped>,
    /// Where the file was copied or moved to keep what was dropped (`None`: nothing was).
    pub set_aside: Option<PathBuf>,
}

/// One override dropped at start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dropped {
    /// Its dotted key (`limiters.request_rate.rate`, `kill_switch`, `reverts[0]`), or
    /// `admin.overrides_file` for a file that could not be read at all.
    pub key: String,
    /// Why, in one sentence.
    pub reason: String,
}

/// One override: a value at a dotted path of the limiters' merge patch.
#[derive(Debug, Clone)]
struct Leaf {
    path: Vec<String>,
    value: Value,
}

impl Leaf {
    fn key(&self) -> String {
        format!("limiters.{}", self.path.join("."))
    }
}

/// Reads `path` (and the version file beside it) over `base`, config.yaml's limiters;
/// `now_ms` (Unix time) names a set-aside copy.
pub(crate) fn restore(base: &LimitersConfig, path: &Path, now_ms: u64) -> Restored {
    let issued = persist::load_version(path);
    let mut restored = Restored {
        limiters: base.clone(),
        kill_switch: false,
        reverts: Vec::new(),
        version: 0,
        report: RestoreReport::default(),
    };
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            restored.version = issued.unwrap_or(0).max(1);
            return restored;
        }
        Err(e) => {
            restored.report.dropped.push(Dropped {
                key: "admin.overrides_file".into(),
                reason: format!("cannot be read ({e}); every change saved in it is not in force"),
            });
            restored.version = next_version(issued, None, now_ms);
            return restored;
        }
    };
    let document = match serde_json::from_slice::<Value>(&text) {
        Ok(Value::Object(members)) => members,
        parsed => {
            // Cut short or garbled: what can be read of it is the kill switch and the
            // version (written first), and the file is moved aside, whole, for the operator.
            let why = match parsed {
                Ok(_) => "is not a JSON object".to_owned(),
                Err(e) => format!("is not valid JSON ({e})"),
            };
            let salvaged = salvage(&text);
            restored.kill_switch = salvaged.kill_switch;
            restored.report.set_aside = set_aside(path, "unreadable", now_ms, true);
            let kept = if salvaged.kill_switch {
                "; its engaged kill switch is kept"
            } else {
                ""
            };
            restored.report.dropped.push(Dropped {
                key: "admin.overrides_file".into(),
                reason: format!("{why}: the changes saved in it are not in force{kept}"),
            });
            restored.version = next_version(issued, salvaged.version, now_ms);
            return restored;
        }
    };
    let mut written_version = None;
    let mut leaves = Vec::new();
    for (name, value) in document {
        match name.as_str() {
            "kill_switch" => match value {
                Value::Bool(engaged) => restored.kill_switch = engaged,
                other => drop_value(&mut restored.report, "kill_switch", &other, "true or false"),
            },
            "version" => match value.as_u64() {
                Some(v) => written_version = Some(v),
                None => drop_value(&mut restored.report, "version", &value, "a whole number"),
            },
            "patch" => match value {
                Value::Object(members) => flatten(&mut Vec::new(), members, &mut leaves),
                Value::Null => {}
                other => drop_value(&mut restored.report, "patch", &other, "a section of keys"),
            },
            "reverts" => match value {
                Value::Array(items) => {
                    for (i, item) in items.into_iter().enumerate() {
                        match serde_json::from_value::<PendingRevert>(item.clone()) {
                            Ok(r) if LimiterName::parse(&r.limiter).is_some() => {
                                restored.reverts.push(r);
                            }
                            _ => drop_value(
                                &mut restored.report,
                                &format!("reverts[{i}]"),
                                &item,
                                "a pending revert of a limiter",
                            ),
                        }
                    }
                }
                other => drop_value(&mut restored.report, "reverts", &other, "a list"),
            },
            other => restored.report.dropped.push(Dropped {
                key: crate::schema::parse::cut(other),
                reason: "is not a member of an overrides file".into(),
            }),
        }
    }
    let (limiters, dropped) = apply(base, &leaves);
    restored.limiters = limiters;
    restored.report.dropped.extend(dropped);
    if !restored.report.dropped.is_empty() {
        restored.report.set_aside = set_aside(path, "dropped", now_ms, false);
    }
    restored.version = if restored.report.dropped.is_empty() {
        issued.unwrap_or(0).max(written_version.unwrap_or(0)).max(1)
    } else {
        next_version(issued, written_version, now_ms)
    };
    restored
}

/// The version after what was dropped: one past the highest issued. When neither the file
/// nor the version file says what that was (both lost), the Unix time in seconds stands in:
/// above any version a server issued one change at a time since 1970.
fn next_version(issued: Option<u64>, written: Option<u64>, now_ms: u64) -> u64 {
    match issued.max(written) {
        Some(v) => v + 1,
        None => (now_ms / 1000).max(1),
    }
}

/// Records that `value` at `key` is not `expected`.
fn drop_value(report: &mut RestoreReport, key: &str, value: &Value, expected: &str) {
    report.dropped.push(Dropped {
        key: key.to_owned(),
        reason: format!(
            "must be {expected}, not {}",
            crate::schema::parse::cut(&value.to_string())
        ),
    });
}

/// The merge patch's leaves: every value that is not a section of keys (lists replace as a
/// whole in a merge patch, so a list is one leaf).
fn flatten(at: &mut Vec<String>, members: Map<String, Value>, out: &mut Vec<Leaf>) {
    for (name, value) in members {
        at.push(name);
        match value {
            Value::Object(inner) if !inner.is_empty() => flatten(at, inner, out),
            value => out.push(Leaf {
                path: at.clone(),
                value,
            }),
        }
        at.pop();
    }
}

/// `base` with `leaves` applied, if the result reads and validates; else why not.
fn holds(base: &Value, leaves: &[&Leaf]) -> Result<LimitersConfig, String> {
    let mut doc = base.clone();
    for leaf in leaves {
        let mut patch = leaf.value.clone();
        for name in leaf.path.iter().rev() {
            let mut section = Map::new();
            section.insert(name.clone(), patch);
            patch = Value::Object(section);
        }
        patch::merge(&mut doc, &patch);
    }
    let limiters = limiters_from_json(doc).map_err(|e| e.to_string())?;
    limiters.validate().map_err(|e| e.to_string())?;
    Ok(limiters)
}

/// Applies every leaf that holds: each on its own over `base`, then together in the file's
/// order; two that only fail together are both dropped, each naming the other.
fn apply(base: &LimitersConfig, leaves: &[Leaf]) -> (LimitersConfig, Vec<Dropped>) {
    let doc = serde_json::to_value(base).unwrap_or(Value::Null);
    let all: Vec<&Leaf> = leaves.iter().collect();
    if let Ok(limiters) = holds(&doc, &all) {
        return (limiters, Vec::new());
    }
    let mut dropped = Vec::new();
    let mut accepted: Vec<&Leaf> = Vec::new();
    for leaf in leaves {
        if let Err(e) = holds(&doc, &[leaf]) {
            dropped.push(Dropped {
                key: leaf.key(),
                reason: e,
            });
            continue;
        }
        let mut with = accepted.clone();
        with.push(leaf);
        let Err(e) = holds(&doc, &with) else {
            accepted.push(leaf);
            continue;
        };
        match accepted
            .iter()
            .position(|other| holds(&doc, &[other, leaf]).is_err())
        {
            Some(i) => {
                let other = accepted.remove(i);
                for (this, that) in [(other, leaf), (leaf, other)] {
                    dropped.push(Dropped {
                        key: this.key(),
                        reason: format!(
                            "holds alone, not beside the saved {} (both dropped): {e}",
                            that.key()
                        ),
                    });
                }
            }
            None => dropped.push(Dropped {
                key: leaf.key(),
                reason: e,
            }),
        }
    }
    match holds(&doc, &accepted) {
        Ok(limiters) => (limiters, dropped),
        // Each step held; whatever this is, config.yaml's limiters are the safe answer.
        Err(e) => {
            dropped.extend(accepted.iter().map(|leaf| Dropped {
                key: leaf.key(),
                reason: e.clone(),
            }));
            (base.clone(), dropped)
        }
    }
}

/// What can be read of a file cut short: an engaged kill switch and a whole version number.
#[derive(Debug, Default, PartialEq)]
struct Salvaged {
    kill_switch: bool,
    version: Option<u64>,
}

fn salvage(text: &[u8]) -> Salvaged {
    let text = String::from_utf8_lossy(text);
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let version = compact.split("\"version\":").nth(1).and_then(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        // Only a number that ends where the writer ended it (a cut "107" reads "10").
        let ended = rest[digits.len()..].starts_with([',', '}']);
        (ended && !digits.is_empty())
            .then(|| digits.parse().ok())
            .flatten()
    });
    Salvaged {
        kill_switch: compact.contains("\"kill_switch\":true"),
        version,
    }
}

/// Copies (or, for a file that cannot be read, moves) `path` to a name of its own beside it
/// (`overrides.json.dropped-<ms>`), never over another file. `None` if that failed (logged by
/// the caller through the report's absence).
fn set_aside(path: &Path, why: &str, now_ms: u64, move_it: bool) -> Option<PathBuf> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let dir = path.parent().unwrap_or(Path::new("."));
    for n in 0..100u32 {
        let suffix = if n == 0 {
            String::new()
        } else {
            format!("-{n}")
        };
        let aside = dir.join(format!("{name}.{why}-{now_ms}{suffix}"));
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&aside);
        match created {
            Ok(_) => {
                let done = if move_it {
                    std::fs::rename(path, &aside).is_ok()
                } else {
                    std::fs::copy(path, &aside).is_ok()
                };
                return done.then_some(aside);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => return None,
        }
    }
    None
}

#[cfg(test)]
#[path = "restore_tests.rs"]
mod tests;
