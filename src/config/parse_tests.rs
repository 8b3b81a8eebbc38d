//! The parser's messages (`crate::schema::parse`), read through config.yaml's own parsing.

use crate::config::sections::yaml;
use crate::schema::parse::{describe_json, line_of};

fn refused(yaml_text: &str) -> String {
    yaml(yaml_text, &[]).unwrap_err().to_string()
}

#[test]
fn type_errors_name_the_key_what_was_expected_and_where() {
    assert_eq!(
        refused("limiters:\n  fleet_usage:\n    capacity: \"eight\"   # slots\n"),
        "limiters.fleet_usage.capacity must be a whole number (0 to 4294967295), not \"eight\" (line 3, column 15)"
    );
    assert_eq!(
        refused("limiters:\n  fleet_usage:\n    capacity: eight\n"),
        "limiters.fleet_usage.capacity must be a whole number (0 to 4294967295), not \"eight\" (line 3, column 15)"
    );
    assert_eq!(
        refused("limiters:\n  request_rate:\n    rate: fast\n"),
        "limiters.request_rate.rate must be a number, not \"fast\" (line 3, column 11)"
    );
    assert_eq!(
        refused("limiters: [1, 2]\n"),
        "limiters must be a section of keys, not \"[1, 2]\" (line 1, column 11)"
    );
}

#[test]
fn a_key_indented_too_deep_is_named_with_the_key_above_and_the_fix() {
    let says = |above: &str, key: &str| {
        format!("limiters.request_rate.{above} has line 4 ({key}) indented deeper than it, so YAML reads that line as part of its value; indent {key} as {above} is (line 3)")
    };
    // A number, an enum, a comment between them, a comment line: one sentence each.
    for (yaml, above, key) in [
        (
            "limiters:\n  request_rate:\n    rate: 5\n     burst: 10\n",
            "rate",
            "burst",
        ),
        (
            "limiters:\n  request_rate:\n    mode: enforce\n     burst: 10\n",
            "mode",
            "burst",
        ),
        (
            "limiters:\n  request_rate:\n    rate: 5  # five\n     burst: 10\n",
            "rate",
            "burst",
        ),
        (
            "limiters:\n  request_rate:\n    rate: 5\n     burst: 10  # ten\n",
            "rate",
            "burst",
        ),
    ] {
        assert_eq!(refused(yaml), says(above, key), "{yaml}");
    }
    let e =
        refused("limiters:\n  request_rate:\n    mode: enforce\n    # a comment\n     burst: 10\n");
    assert!(
        e.starts_with("limiters.request_rate.mode has line 5 (burst) indented deeper"),
        "{e}"
    );
}

#[test]
fn duplicate_and_unknown_keys_are_named_without_library_hints() {
    let e = refused("limiters:\n  fleet_usage:\n    capacity: 8\n    capacity: 9\n");
    assert_eq!(
        e,
        "limiters.fleet_usage.capacity appears twice in its section; keep one (line 4, column 5)"
    );
    let e = refused("limiters:\n  fleet_usage:\n    capacityy: 8\n");
    assert!(
        e.starts_with("limiters.fleet_usage.capacityy is not a known key; did you mean capacity?"),
        "{e}"
    );
    for e in [e, refused("demo:\n  workers: -1\n")] {
        assert!(
            !e.contains('\n') && !e.contains("Options") && !e.contains("-->"),
            "{e}"
        );
    }
}

#[test]
fn quoting_mistakes_name_their_key_and_what_is_wrong() {
    assert_eq!(
        refused("limiters:\n  request_rate:\n    mode: \"\\ud800\"\n"),
        "limiters.request_rate.mode has a quoted value with an escape that is not a character (such as a lone \\ud800, or \\q); write the character itself, or a valid escape (line 3, column 11)"
    );
    assert!(refused("limiters:\n  request_rate:\n    mode: \"\\q\"\n")
        .starts_with("limiters.request_rate.mode has a quoted value with an escape"));
    let e = refused("limiters:\n  request_rate:\n    mode: \"abc\n");
    assert!(e.contains("closing quote is missing"), "{e}");
}

#[test]
fn long_values_and_keys_are_cut_and_large_sections_not_listed() {
    let long = "x".repeat(10_000);
    let e = refused(&format!(
        "limiters:\n  request_rate:\n    mode: \"{long}\"\n"
    ));
    assert!(e.len() < 200, "{} characters: {e}", e.len());
    assert!(
        e.contains("must be one of enforce, dark, off, not \"xxx"),
        "{e}"
    );
    assert!(e.contains("(10002 characters)"), "{e}");
    let e = refused(&format!("limiters:\n  request_rate:\n    {long}: 1\n"));
    assert!(e.len() < 250, "{} characters: {e}", e.len());
    // A typo names the key meant; a key like none of them does not list a large section.
    let e = refused("limiters:\n  worker_utilization:\n    end_of_god: 0.5\n");
    assert_eq!(
        e,
        "limiters.worker_utilization.end_of_god is not a known key; did you mean end_of_good? (line 3, column 5)"
    );
    let e = refused("limiters:\n  worker_utilization:\n    zzz: 0.5\n");
    assert!(e.len() < 200, "{} characters: {e}", e.len());
    assert!(
        e.contains("this section has 15 keys, such as mode, source"),
        "{e}"
    );
    let e = describe_json(&format!("invalid type: string \"{long}\", expected f64"));
    assert!(e.len() < 100, "{e}");
}

#[test]
fn json_type_errors_read_as_the_files() {
    assert_eq!(
        describe_json("invalid type: string \"fifty\", expected f64"),
        "must be a number, not \"fifty\""
    );
    assert_eq!(
        describe_json("invalid value: integer `-1`, expected u32"),
        "must be a whole number (0 to 4294967295), not -1"
    );
    assert_eq!(
        describe_json("invalid type: map, expected a boolean"),
        "must be true or false, not a section of keys"
    );
    assert_eq!(
        describe_json("unknown field `rat`, expected one of `mode`, `rate`"),
        "is not a known key; did you mean rate?"
    );
    assert_eq!(
        describe_json("unknown variant `on`, expected one of `enforce`, `dark`, `off`"),
        "must be one of enforce, dark, off, not \"on\""
    );
}

#[test]
fn a_key_is_found_on_its_line() {
    let text = "# top\nadmin:\n  bind: x\nlimiters:\n  fleet_usage:\n    mode: enforce\n\n    capacity: 8\n  worker_utilization:\n    start_of_bad: 1.5\n    costs: { \"a\": 1 }\n";
    assert_eq!(line_of(text, "limiters.fleet_usage.capacity"), Some(8));
    assert_eq!(
        line_of(text, "limiters.worker_utilization.start_of_bad"),
        Some(10)
    );
    assert_eq!(
        line_of(text, "limiters.worker_utilization.costs.a"),
        Some(11)
    );
    assert_eq!(line_of(text, "limiters.worker_utilization"), Some(9));
    // Not in the file (a default).
    assert_eq!(line_of(text, "limiters.request_rate.rate"), None);
    assert_eq!(line_of(text, "limiters.fleet_usage.retry_after"), None);
    assert_eq!(line_of(text, "store.kind"), None);
    assert_eq!(line_of(text, "admin.bind"), Some(3));
}

#[test]
fn an_unclosed_quote_and_a_missing_value_read_as_one_true_sentence() {
    assert_eq!(
        refused("admin:\n  bind: \"127.0.0.1:9090\n"),
        "admin has a quoted value whose closing quote is missing; close it (line 3, column 1)"
    );
    for (text, key) in [
        ("admin:\n  bind:\n", "admin.bind"),
        ("admin:\n  bind: ~\n", "admin.bind"),
        (
            "limiters:\n  worker_utilization:\n    sample_interval:\n",
            "limiters.worker_utilization.sample_interval",
        ),
        (
            "limiters:\n  worker_utilization:\n    end_of_good:\n",
            "limiters.worker_utilization.end_of_good",
        ),
        (
            "limiters:\n  request_rate:\n    burst: ~\n",
            "limiters.request_rate.burst",
        ),
        (
            "limiters:\n  worker_utilization:\n    mode: ~\n",
            "limiters.worker_utilization.mode",
        ),
    ] {
        let e = refused(text);
        assert!(e.starts_with(&format!("{key} has no value; write")), "{e}");
        assert!(
            e.contains("or leave the key out for its default (line"),
            "{e}"
        );
        assert!(!e.contains("Option<") && !e.contains('`'), "{e}");
    }
    assert!(
        refused("limiters:\n  worker_utilization:\n    mode: loud\n").starts_with(
            "limiters.worker_utilization.mode must be one of enforce, dark, off, not \"loud\""
        )
    );
}

#[test]
fn an_empty_file_is_refused() {
    for text in ["", "\n\n", "# only a comment\n", "---\n"] {
        assert!(refused(text).contains("the file is empty"), "{text:?}");
    }
    assert!(yaml("{}", &[]).is_ok());
}

/// A bad value on a list item's first line after its dash (a quota's misspelt algorithm)
/// names the value, not an indentation mistake: the dash indents its first key as deep as
/// the keys under it.
#[test]
fn a_bad_value_after_a_list_items_first_key_is_named_not_read_as_indentation() {
    let e = refused("limiters:\n  request_rate:\n    quotas:\n      - name: q\n        algorithm: sliding-log\n        limit: 3\n        window: 1h\n");
    assert!(
        e.starts_with("limiters.request_rate.quotas[0].algorithm must be one of fixed_window, sliding_window, sliding_log, not \"sliding-log\""),
        "{e}"
    );
    // A key really indented deeper than a list item's first key still is.
    let e = refused("limiters:\n  request_rate:\n    quotas:\n      - name: q\n          algorithm: sliding_log\n");
    assert!(e.contains("indented deeper than it"), "{e}");
}
