//! JSON merge patch (RFC 7396): applying one, and computing the patch between two documents
//! (used to persist admin changes as a patch over config.yaml).

use crate::config::ConfigError;
use crate::limiter::LimiterName;
use serde_json::{Map, Value};

/// The members of a merge patch of the `GET /v1/config` document.
#[derive(Debug, Default, PartialEq)]
pub struct DocumentPatch<'a> {
    /// The patch of `limiters`.
    pub limiters: Option<&'a Value>,
    /// The new `kill_switch`.
    pub kill_switch: Option<bool>,
}

/// Splits a merge patch of the document `{"kill_switch", "limiters", "version"}` into its
/// parts. `version` is read-only: it may be sent back unchanged (the GET document patched
/// back as a whole), not changed. Every refusal names the member.
pub fn split_document(patch: &Value, version: u64) -> Result<DocumentPatch<'_>, ConfigError> {
    let Some(members) = patch.as_object() else {
        return Err(ConfigError::invalid(
            "body",
            "must be a JSON object: a merge patch of {\"kill_switch\", \"limiters\", \"version\"}",
        ));
    };
    let mut doc = DocumentPatch::default();
    for (name, value) in members {
        match name.as_str() {
            "limiters" if value.is_object() => doc.limiters = Some(value),
            "limiters" => {
                return Err(ConfigError::invalid(
                    "limiters",
                    "must be an object: a merge patch of the limiter settings",
                ))
            }
            "kill_switch" => {
                let engaged = value.as_bool().ok_or_else(|| {
                    ConfigError::invalid("kill_switch", "must be true or false")
                })?;
                doc.kill_switch = Some(engaged);
            }
            "version" if value.as_u64() == Some(version) => {}
            "version" => {
                return Err(ConfigError::invalid(
                    "version",
                    format!("is read-only (the settings are at version {version}); to patch a given version, send If-Match"),
                ))
            }
            other if LimiterName::parse(other).is_some() => {
                return Err(ConfigError::invalid(
                    other,
                    format!("is not a member of the document; limiter settings go under \"limiters\": {{\"limiters\": {{\"{other}\": …}}}}"),
                ))
            }
            other => {
                return Err(ConfigError::invalid(
                    other,
                    "is not a member of the document, which has kill_switch, limiters and version",
                ))
            }
        }
    }
    Ok(doc)
}

/// Applies `patch` to `target` as RFC 7396 says: objects merge recursively, `null` removes a
/// member, anything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(doc) = target else {
        unreachable!("made an object above")
    };
    for (name, value) in members {
        if value.is_null() {
            doc.remove(name);
        } else {
            merge(doc.entry(name.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The merge patch that turns `from` into `to` (`None` when they are equal).
pub fn diff(from: &Value, to: &Value) -> Option<Value> {
    if from == to {
        return None;
    }
    match (from, to) {
        (Value::Object(a), Value::Object(b)) => {
            let mut patch = Map::new();
            for (name, old) in a {
                match b.get(name) {
                    None => {
                        patch.insert(name.clone(), Value::Null);
                    }
                    Some(new) => {
                        if let Some(d) = diff(old, new) {
                            patch.insert(name.clone(), d);
                        }
                    }
                }
            }
            for (name, new) in b {
                if !a.contains_key(name) {
                    patch.insert(name.clone(), new.clone());
                }
            }
            Some(Value::Object(patch))
        }
        _ => Some(to.clone()),
    }
}

#[cfg(test)]
#[path = "patch_tests.rs"]
mod tests;
