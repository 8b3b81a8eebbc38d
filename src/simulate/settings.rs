//! `--set KEY=VALUE`: a setting an operator could PATCH, applied to the simulated config
//! through the same merge patch and validation as `PATCH /v1/config`.

use crate::config::{Config, ConfigError};
use crate::ops::limiters_from_json;
use crate::ops::patch::{merge, split_document};
use serde_json::{Map, Value};

/// Applies each `KEY=VALUE` (a dotted path into the `GET /v1/config` document, such as
/// `limiters.worker_utilization.start_of_bad=0.85` or `kill_switch=true`; the value read as
/// JSON, else as a string) to `config`; returns whether the kill switch ends up engaged
/// (`kill_switch=true`). Nothing changes unless every one is valid; an error names the key.
pub fn apply(config: &mut Config, sets: &[String]) -> Result<bool, ConfigError> {
    let mut patch = Value::Object(Map::new());
    for set in sets {
        let Some((key, raw)) = set.split_once('=') else {
            return Err(ConfigError::invalid(
                set.as_str(),
                "must be KEY=VALUE, like limiters.worker_utilization.start_of_bad=0.85",
            ));
        };
        let value = serde_json::from_str(raw.trim()).unwrap_or_else(|_| Value::from(raw.trim()));
        let mut nested = value;
        for part in key.trim().rsplit('.') {
            if part.is_empty() {
                return Err(ConfigError::invalid(key, "has an empty part"));
            }
            nested = Value::Object(Map::from_iter([(part.to_owned(), nested)]));
        }
        merge(&mut patch, &nested);
    }
    let doc = split_document(&patch, 0)?;
    let mut limiters = config.limiters.clone();
    if let Some(changes) = doc.limiters {
        let mut merged = serde_json::to_value(&limiters).unwrap_or(Value::Null);
        merge(&mut merged, changes);
        limiters = limiters_from_json(merged)?;
    }
    limiters.validate()?;
    config.limiters = limiters;
    Ok(doc.kill_switch.unwrap_or(false))
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
