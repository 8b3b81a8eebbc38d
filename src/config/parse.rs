//! YAML text to [`Config`], with errors an operator can act on: the dotted key, what was
//! expected, and where, on one line.

use super::{Config, ConfigError};
use crate::logging::one_line;
use std::cell::RefCell;

/// Parses `text`; an empty file (nothing but comments) is an error, not a default config.
pub(super) fn yaml(text: &str) -> Result<Config, ConfigError> {
    let has_content = text
        .lines()
        .map(str::trim)
        .any(|l| !l.is_empty() && !l.starts_with('#') && l != "---");
    if !has_content {
        return Err(ConfigError::Parse(
            "the file is empty; write at least one section (every key has a default, so `{}` is the smallest valid file)".into(),
        ));
    }
    let path = RefCell::new(String::new());
    let mut options = serde_saphyr::options::Options::default();
    options.with_snippet = false;
    serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            *path.borrow_mut() = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| describe(text, &e, &path.into_inner()))
}

/// One line, naming the dotted key, what was expected and where: `limiters.fleet_usage.capacity
/// must be a whole number (0 to 4294967295), not "eight" (line 116, column 15)`.
fn describe(text: &str, e: &serde_saphyr::Error, path: &str) -> ConfigError {
    let location = e.location();
    let at = location
        .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
        .unwrap_or_default();
    let raw = strip_location(&one_line(&e.to_string()));
    let found = location
        .and_then(|l| scalar_at(text, l.line() as usize, l.column() as usize))
        .unwrap_or_default();
    let mut key = path.to_owned();
    let message = if let Some(name) = raw.strip_prefix("duplicate mapping key: ") {
        let name = name.split(',').next().unwrap_or(name).trim();
        key = format!("{}{name}", key.trim_end_matches('?'));
        "appears twice in its section; keep one".to_owned()
    } else if let Some(kind) = raw.strip_prefix("invalid ") {
        format!("must be {}, not {found}", expected(kind))
    } else if let Some(rest) = raw.strip_prefix("unknown field ") {
        match rest.split_once(", expected one of ") {
            Some((_, known)) => format!("is not a known key; the keys here are {known}"),
            None => "is not a known key".to_owned(),
        }
    } else if raw == "expected mapping start" {
        format!("must be a section of keys, not {found}")
    } else {
        raw
    };
    if key.is_empty() || key == "." {
        ConfigError::Parse(format!("{message}{at}"))
    } else {
        ConfigError::invalid(key, format!("{message}{at}"))
    }
}

/// What a parser's type name means to an operator.
fn expected(kind: &str) -> String {
    match kind {
        "u8" | "u16" | "u32" | "u64" | "usize" => {
            let max = match kind {
                "u8" => u64::from(u8::MAX),
                "u16" => u64::from(u16::MAX),
                "u32" => u64::from(u32::MAX),
                _ => u64::MAX,
            };
            format!("a whole number (0 to {max})")
        }
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".to_owned(),
        "f32" | "f64" | "floating point" => "a number".to_owned(),
        "bool" | "boolean" => "true or false".to_owned(),
        other => format!("a {other}"),
    }
}

/// The value written at `line`, `column` (1-based), without a trailing comment.
fn scalar_at(text: &str, line: usize, column: usize) -> Option<String> {
    let l = text.lines().nth(line.checked_sub(1)?)?;
    let rest: String = l.chars().skip(column.saturating_sub(1)).collect();
    let value = match rest.find(" #") {
        Some(i) => &rest[..i],
        None => &rest,
    };
    let value = value.trim();
    (!value.is_empty()).then(|| {
        if value.starts_with('"') || value.starts_with('\'') {
            value.to_owned()
        } else {
            format!("{value:?}")
        }
    })
}

/// Drops the parser's own location (`line N column M:` before, ` at line N, column M` or
/// ` --> <input>:N:M` after) and its library hints: the caller says where, once.
fn strip_location(message: &str) -> String {
    let mut m = message.trim();
    if let Some(rest) = m.strip_prefix("error: ") {
        m = rest;
    }
    if m.starts_with("line ") {
        if let Some((_, rest)) = m.split_once(": ") {
            m = rest;
        }
    }
    for tail in [" --> ", " at line "] {
        if let Some((before, _)) = m.rsplit_once(tail) {
            m = before;
        }
    }
    m.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(yaml_text: &str) -> String {
        yaml(yaml_text).unwrap_err().to_string()
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
    fn duplicate_and_unknown_keys_are_named_without_library_hints() {
        let e = refused("limiters:\n  fleet_usage:\n    capacity: 8\n    capacity: 9\n");
        assert_eq!(
            e,
            "limiters.fleet_usage.capacity appears twice in its section; keep one (line 4, column 5)"
        );
        let e = refused("limiters:\n  fleet_usage:\n    capacityy: 8\n");
        assert!(
            e.starts_with("limiters.fleet_usage.capacityy is not a known key; the keys here are mode, capacity"),
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
    fn an_empty_file_is_refused() {
        for text in ["", "\n\n", "# only a comment\n", "---\n"] {
            assert!(refused(text).contains("the file is empty"), "{text:?}");
        }
        assert!(yaml("{}").is_ok());
    }
}
