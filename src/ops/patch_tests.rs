//! Tests of `ops/patch.rs`.

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

#[test]
fn the_get_document_patches_back_and_version_is_read_only() {
    let get =
        json!({"kill_switch": false, "limiters": {"request_rate": {"rate": 5}}, "version": 7});
    let doc = split_document(&get, 7).unwrap();
    assert_eq!(doc.kill_switch, Some(false));
    assert_eq!(doc.limiters, Some(&json!({"request_rate": {"rate": 5}})));
    let e = split_document(&json!({"version": 8}), 7).unwrap_err();
    assert_eq!(e.key(), Some("version"));
    let e = split_document(&json!({"request_rate": {"rate": 5}}), 7).unwrap_err();
    assert_eq!(e.key(), Some("request_rate"));
    assert!(e.to_string().contains("\"limiters\""), "{e}");
    let e = split_document(&json!({"kill_switch": null}), 7).unwrap_err();
    assert_eq!(e.key(), Some("kill_switch"));
    let e = split_document(&json!({"limiters": null}), 7).unwrap_err();
    assert_eq!(e.key(), Some("limiters"));
}
