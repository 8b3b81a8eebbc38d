//! JSON merge patch (RFC 7396): applying one, and computing the patch between two documents
//! (used to persist admin changes as a patch over config.yaml).

use serde_json::{Map, Value};

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
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc_7396_examples() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (target, patch, want) in cases {
            let mut doc = target.clone();
            merge(&mut doc, &patch);
            assert_eq!(doc, want, "{target} + {patch}");
        }
    }

    #[test]
    fn diff_then_merge_round_trips() {
        let from = json!({"a": {"x": 1, "y": [1, 2]}, "b": "keep", "gone": true});
        let to = json!({"a": {"x": 2, "y": [1, 2]}, "b": "keep", "new": {"z": 3}});
        let patch = diff(&from, &to).unwrap();
        assert_eq!(patch, json!({"a": {"x": 2}, "gone": null, "new": {"z": 3}}));
        let mut doc = from.clone();
        merge(&mut doc, &patch);
        assert_eq!(doc, to);
        assert_eq!(diff(&to, &to), None);
    }
}
