//! YAML text to [`Config`], with errors an operator can act on: the dotted key, what was
//! expected, and where, on one line.

use super::ConfigError;
use crate::logging::one_line;
use serde::de::DeserializeSeed;
use std::cell::RefCell;

/// Runs `seed` over the YAML document `text`, naming the dotted key of a problem.
pub(crate) fn with_seed<T, S>(text: &str, seed: S) -> Result<T, ConfigError>
where
    S: for<'de> DeserializeSeed<'de, Value = T>,
{
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
        let mut track = serde_path_to_error::Track::new();
        seed.deserialize(serde_path_to_error::Deserializer::new(de, &mut track))
            .inspect_err(|_| *path.borrow_mut() = track.path().to_string())
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
        .map(|f| cut(&f))
        .unwrap_or_default();
    let mut key = path.to_owned();
    // A key written with nothing after it (`bind:`), or with YAML's null (`~`, `null`).
    let empty = matches!(found.as_str(), "" | "\":\"" | "\"~\"" | "\"null\"");
    // `rate: 5` then `burst: 10` one space deeper: YAML reads `5 burst: 10` as rate's value
    // (or stops at a comment between them): name both keys and the fix, whatever it said.
    let indented = [
        "invalid ",
        "unknown variant ",
        "comment intercepting",
        "did not find expected key",
        "mapping values are not allowed",
    ]
    .iter()
    .any(|m| raw.contains(m));
    if let Some((above, name, deeper, child)) = location
        .filter(|_| indented)
        .and_then(|l| indent_mistake(text, l.line() as usize))
    {
        let key = path
            .rsplit_once('.')
            .map_or(String::new(), |(p, _)| format!("{p}."));
        let key = format!("{}{name}", key.trim_start_matches('.'));
        return ConfigError::invalid(
            key,
            format!("has line {deeper} ({child}) indented deeper than it, so YAML reads that line as part of its value; indent {child} as {name} is (line {above})"),
        );
    }
    let message = if let Some(name) = raw.strip_prefix("duplicate mapping key: ") {
        let name = name.split(',').next().unwrap_or(name).trim();
        key = format!("{}{name}", key.trim_end_matches('?'));
        "appears twice in its section; keep one".to_owned()
    } else if let Some(problem) = quoting(&raw) {
        // The scanner stops inside the value, before its key reaches the path: the key is
        // the one written on the line it stopped at.
        if let Some(name) = location.and_then(|l| key_on_line(text, l.line() as usize)) {
            if key.rsplit('.').next() != Some(name.as_str()) {
                key = if key.is_empty() || key == "." {
                    name
                } else {
                    format!("{key}.{name}")
                };
            }
        }
        problem.to_owned()
    } else if raw.starts_with("cannot deserialize null") {
        "has no value; write one, or leave the key out for its default".to_owned()
    } else if let Some(kind) = raw.strip_prefix("invalid ").filter(|k| is_type_name(k)) {
        if empty {
            format!(
                "has no value; write {}, or leave the key out for its default",
                expected(kind)
            )
        } else {
            format!("must be {}, not {found}", expected(kind))
        }
    } else if let Some(rest) = raw.strip_prefix("unknown variant ") {
        let known = rest.split_once(", expected one of ").map_or("", |(_, k)| k);
        let known = known.replace('`', "");
        if empty {
            format!("has no value; write one of {known}, or leave the key out for its default")
        } else {
            format!("must be one of {known}, not {found}")
        }
    } else if let Some(rest) = raw.strip_prefix("unknown field ") {
        unknown_key(rest)
    } else if raw == "expected mapping start" {
        format!("must be a section of keys, not {found}")
    } else {
        raw
    };
    if key.is_empty() || key == "." {
        ConfigError::Parse(format!("{message}{at}"))
    } else {
        let key = key.split('.').map(cut).collect::<Vec<_>>().join(".");
        ConfigError::invalid(key, format!("{message}{at}"))
    }
}

/// What a quoting mistake the YAML scanner found means, in the file's words (`None`: not one).
fn quoting(raw: &str) -> Option<&'static str> {
    if raw.contains("escape") || raw.contains("surrogate") || raw.contains("hexadecimal") {
        Some("has a quoted value with an escape that is not a character (such as a lone \\ud800, or \\q); write the character itself, or a valid escape")
    } else if raw.contains("trailing content after") {
        Some("has text after its quoted value's closing quote; quote the whole value")
    } else if raw.contains("unclosed quote") || raw.contains("quoted scalar") {
        // The parser ran to the end of a value whose opening quote was never closed (its
        // next lines read as the value's continuation, indented too little).
        Some("has a quoted value whose closing quote is missing; close it")
    } else {
        None
    }
}

/// A key indented deeper than the key with a value above it, at or next to `line` (1-based):
/// the line above and its key, the deeper line and its key.
fn indent_mistake(text: &str, line: usize) -> Option<(usize, String, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    // A list item's dash indents its first key as deep as the keys under it.
    let indent = |l: &str| {
        let t = l.trim_start();
        let item = t.strip_prefix('-').filter(|r| r.starts_with(' '));
        l.len() - item.map_or(t, str::trim_start).len()
    };
    let written = |n: &usize| {
        let t = lines.get(*n - 1).map_or("", |l| l.trim());
        !t.is_empty() && !t.starts_with('#')
    };
    let before = |n: usize| (1..n).rev().find(written);
    let after = |n: usize| (n + 1..=lines.len()).find(written);
    let pairs = [
        before(line).map(|b| (b, line)),
        after(line).map(|a| (line, a)),
    ];
    pairs.into_iter().flatten().find_map(|(above, deeper)| {
        let (a, d) = (lines.get(above - 1)?, lines.get(deeper - 1)?);
        let value = a.split_once(':')?.1.split('#').next()?.trim();
        (indent(d) > indent(a) && !value.is_empty()).then_some(())?;
        Some((
            above,
            key_on_line(text, above)?,
            deeper,
            key_on_line(text, deeper)?,
        ))
    })
}

/// The key written at the start of `line` (1-based) of `text`, as in `mode: "x"`.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let l = text.lines().nth(line.checked_sub(1)?)?.trim_start();
    let l = l.strip_prefix("- ").unwrap_or(l);
    let (name, _) = l.split_once(':')?;
    let name = name.trim().trim_matches(|c| c == '"' || c == '\'');
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    plain.then(|| name.to_owned())
}

/// Values and keys longer than this are cut in messages: a line stays a line.
const SHOWN_CHARS: usize = 60;

/// `text` as shown in a message: whole up to [`SHOWN_CHARS`], else its start, an ellipsis
/// and its length (a 10,000-character value is not echoed into the log).
pub(crate) fn cut(text: &str) -> String {
    cut_to(text, SHOWN_CHARS)
}

/// `text` whole up to `limit` characters, else its start, an ellipsis and its length.
fn cut_to(text: &str, limit: usize) -> String {
    let n = text.chars().count();
    if n <= limit {
        return text.to_owned();
    }
    let start: String = text.chars().take(limit.saturating_sub(12)).collect();
    format!("{start}… ({n} characters)")
}

/// serde's `unknown field `x`, expected one of `a`, `b`` in the file's words: the key most
/// like the one written (a typo), or, when none is close, how many keys the section has and
/// a few of them; never the whole list of a large section.
fn unknown_key(rest: &str) -> String {
    let Some((written, known)) = rest.split_once(", expected one of ") else {
        return "is not a known key".to_owned();
    };
    let written = written.trim().trim_matches('`');
    let known: Vec<&str> = known
        .split(", ")
        .map(|k| k.trim().trim_matches('`'))
        .collect();
    let closest = known
        .iter()
        .map(|k| (edit_distance(written, k), *k))
        .min_by_key(|&(d, _)| d);
    match closest {
        Some((d, k)) if d <= 2.max(k.len() / 3) => {
            format!("is not a known key; did you mean {k}?")
        }
        _ if known.len() <= 6 => format!("is not a known key; the keys here are {}", known.join(", ")),
        _ => format!(
            "is not a known key; this section has {} keys, such as {} (docs/configuration.md has them all)",
            known.len(),
            known[..4].join(", ")
        ),
    }
}

/// Levenshtein distance between `a` and `b`, by characters (keys are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// A serde message about a JSON document (an admin PATCH) in the file's words: `invalid
/// type: string "fifty", expected f64` reads `must be a number, not "fifty"`, as the same
/// mistake in config.yaml does. Messages it does not know are kept.
pub(crate) fn describe_json(raw: &str) -> String {
    // serde_json says where in the body; the field's name says it better.
    let raw = match raw.trim().rsplit_once(" at line ") {
        Some((message, at)) if at.contains(" column ") => message,
        _ => raw.trim(),
    };
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = raw.strip_prefix(prefix) {
            if let Some((found, kind)) = rest.rsplit_once(", expected ") {
                return format!(
                    "must be {}, not {}",
                    expected(kind),
                    cut(&json_found(found))
                );
            }
        }
    }
    if let Some(rest) = raw.strip_prefix("unknown field ") {
        return unknown_key(rest);
    }
    if let Some(rest) = raw.strip_prefix("unknown variant ") {
        if let Some((found, known)) = rest.split_once(", expected one of ") {
            let found = cut(&format!("{:?}", found.trim_matches('`')));
            return format!("must be one of {}, not {found}", known.replace('`', ""));
        }
    }
    cut_long(raw)
}

/// A message that may quote what was sent, cut where it runs long.
fn cut_long(raw: &str) -> String {
    cut_to(raw, 3 * SHOWN_CHARS)
}

/// serde's description of a JSON value (`string "fifty"`, ``integer `5` ``) as written.
fn json_found(found: &str) -> String {
    for prefix in ["string ", "integer ", "floating point ", "boolean "] {
        if let Some(value) = found.strip_prefix(prefix) {
            return value.trim_matches('`').to_owned();
        }
    }
    match found {
        "map" => "a section of keys".to_owned(),
        "sequence" => "a list".to_owned(),
        "unit" => "null".to_owned(),
        other => other.to_owned(),
    }
}

/// The line (1-based) of dotted `key` in YAML `text`, if it is written there (`[i]` indices,
/// and keys inside a flow mapping or list like `costs: { .. }`, resolve to the line of the
/// key that holds them); `None` for a key the file leaves at its default.
pub(crate) fn line_of(text: &str, key: &str) -> Option<usize> {
    let parts: Vec<&str> = key
        .split('.')
        .map(|p| p.split('[').next().unwrap_or(p))
        .collect();
    let (mut part, mut best, mut flow) = (0, None, false);
    let mut parent: Option<usize> = None;
    let mut child: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed == "---" {
            continue;
        }
        let indent = line.len() - trimmed.len();
        if parent.is_some_and(|p| indent <= p) {
            break;
        }
        let child_indent = *child.get_or_insert(indent);
        if indent != child_indent {
            continue;
        }
        let name = trimmed
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches(|c| c == '"' || c == '\'');
        if name == parts[part] {
            best = Some(n + 1);
            part += 1;
            let value = trimmed.split_once(':').map_or("", |(_, v)| v.trim_start());
            flow = value.starts_with('{') || value.starts_with('[');
            if part == parts.len() || flow {
                break;
            }
            (parent, child) = (Some(indent), None);
        }
    }
    (part == parts.len() || flow).then_some(best).flatten()
}

/// Whether `kind` (what follows "invalid " in a parser's message) names a type, as in
/// `invalid u32`, and not a syntax error such as `invalid indentation in ...`.
fn is_type_name(kind: &str) -> bool {
    !kind.contains(' ')
        || kind.starts_with("a ")
        || kind.starts_with("an ")
        || kind == "floating point"
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
        "bool" | "boolean" | "a boolean" => "true or false".to_owned(),
        "a string" | "string" => "a string".to_owned(),
        other if other.starts_with("a ") || other.starts_with("an ") => other.to_owned(),
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
