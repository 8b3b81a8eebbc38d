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
mod tests {
    use super::*;

    fn sets(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn settings_apply_like_a_patch() {
        let mut c = Config::default();
        let killed = apply(
            &mut c,
            &sets(&[
                "limiters.worker_utilization.start_of_bad=0.95",
                "limiters.worker_utilization.mode=dark",
                "limiters.worker_utilization.sample_interval=2s",
            ]),
        )
        .unwrap();
        let wu = &c.limiters.worker_utilization;
        assert_eq!(wu.start_of_bad, 0.95);
        assert_eq!(wu.mode, crate::config::Mode::Dark);
        assert_eq!(wu.sample_interval.get(), std::time::Duration::from_secs(2));
        assert!(!killed);
        assert!(apply(&mut c, &sets(&["kill_switch=true"])).unwrap());
    }

    #[test]
    fn a_bad_setting_names_its_key_and_changes_nothing() {
        let mut c = Config::default();
        let before = c.limiters.clone();
        let bad = [
            (
                "limiters.worker_utilization.start_of_bad=0.5",
                "limiters.worker_utilization",
            ),
            (
                "limiters.worker_utilization.start_of_bad=lots",
                "limiters.worker_utilization.start_of_bad",
            ),
            (
                "limiters.worker_utilization.nope=1",
                "limiters.worker_utilization",
            ),
            ("worker_utilization.mode=off", "worker_utilization"),
            (
                "limiters.worker_utilization.mode",
                "limiters.worker_utilization.mode",
            ),
        ];
        for (set, key) in bad {
            let e = apply(
                &mut c,
                &sets(&["limiters.worker_utilization.end_of_good=0.6", set]),
            )
            .unwrap_err();
            assert!(e.to_string().starts_with(key), "{set}: {e}");
        }
        assert_eq!(c.limiters, before);
    }
}
