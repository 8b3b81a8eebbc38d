//! The docs cannot drift from the code: docs/configuration.md's table of defaults is read and
//! compared with the code's defaults, every example error in the README and docs/ is produced
//! by the binary from the shipped config.yaml and compared word for word, and every relative
//! link and anchor in the README and docs/ leads somewhere.

mod common;

use brownout::config::HumanDuration;
use brownout_cli::config::CliConfig;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README and every page of docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The text between backticks in `cell`, in order.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// The table's keys of one row: `a.b.c` / `d` is `a.b.c` and `a.b.d`.
fn row_keys(cell: &str) -> Vec<String> {
    let spans = code_spans(cell);
    let Some(first) = spans.first() else {
        return Vec::new();
    };
    let parent = first.rsplit_once('.').map_or("", |(p, _)| p);
    spans
        .iter()
        .map(|k| {
            if k.contains('.') {
                (*k).to_owned()
            } else {
                format!("{parent}.{k}")
            }
        })
        .collect()
}

fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// Whether the table's `doc` (the first code span of a default) says `value`.
fn says(doc: &str, value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => doc == b.to_string(),
        Value::Number(n) => doc.replace('_', "").parse::<f64>().ok() == n.as_f64(),
        Value::String(s) => doc == s || same_duration(doc, s),
        Value::Array(items) => {
            let listed: Vec<&str> = doc
                .trim_start_matches('[')
                .trim_end_matches(']')
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            items.len() == listed.len() && items.iter().zip(&listed).all(|(v, d)| says(d, v))
        }
        Value::Object(map) => doc == "{}" && map.is_empty(),
    }
}

/// Whether both are durations, and the same (`60s` is `1m`).
fn same_duration(a: &str, b: &str) -> bool {
    let parse = |s: &str| serde_json::from_value::<HumanDuration>(Value::String(s.into())).ok();
    parse(a).is_some_and(|a| Some(a) == parse(b))
}

/// Rows whose default is said in words, not as a value: the key and why.
const IN_WORDS: [(&str, &str); 5] = [
    ("admin.scope", "fleet with a Redis store, else local"),
    ("admin.instance", "the host's name and the process id"),
    ("limiters.worker_utilization.capacity", "learned"),
    ("limiters.worker_utilization.bands", "thirds"),
    ("limiters.worker_utilization.retry_after", "sample_interval"),
];

/// Keys whose entries are the user's own names (a map or list of records): the table describes
/// one entry's fields in words.
const OPEN: [&str; 2] = [
    "limiters.request_rate.plans",
    "limiters.request_rate.quotas",
];

#[test]
fn the_configuration_tables_defaults_are_the_codes() {
    let page = read(&root().join("docs/configuration.md"));
    let defaults = serde_json::to_value(CliConfig::default()).unwrap();
    let (mut checked, mut wrong, mut in_words) = (BTreeSet::new(), Vec::new(), BTreeSet::new());
    for line in page.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let (keys, default) = (row_keys(cells[0]), cells[1]);
        let parts: Vec<&str> = default.split(" / ").collect();
        for (i, key) in keys.iter().enumerate() {
            let key = key.trim_end_matches("[]");
            if let Some((prefix, rest)) = key.split_once('<') {
                // `a.<name>.b`: every entry of `a` the code has (a limiter, a tier), with a
                // default per entry when the cell names one (`x` (name)), else the cell's.
                let rest = rest
                    .split_once('>')
                    .map_or("", |(_, r)| r.trim_start_matches('.'));
                let entries = at(&defaults, prefix.trim_end_matches('.'))
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten();
                for (name, entry) in entries {
                    let value = if rest.is_empty() { entry } else { &entry[rest] };
                    if value.is_null() || OPEN.iter().any(|o| key.starts_with(o)) {
                        continue; // a limiter without a mode (deadline); a user's plan
                    }
                    let part = default
                        .split(", ")
                        .find(|p| p.contains(&format!("({name})")) || p.contains("(others)"))
                        .unwrap_or(default);
                    let said = code_spans(part).first().copied().unwrap_or_default();
                    if !says(said, value) {
                        wrong.push(format!("{key} of {name}: table {said:?}, code {value}"));
                    }
                }
                checked.insert(key.to_owned());
                continue;
            }
            if OPEN.iter().any(|o| key.starts_with(o)) {
                checked.insert(key.to_owned());
                continue;
            }
            if IN_WORDS.iter().any(|(k, _)| *k == key) {
                in_words.insert(key.to_owned());
                checked.insert(key.to_owned());
                continue;
            }
            // A key the code leaves out when unset reads as unset.
            let parent = key.rsplit_once('.').map_or("", |(p, _)| p);
            let value = match (at(&defaults, key), at(&defaults, parent)) {
                (Some(value), _) => value,
                (None, Some(Value::Object(_))) => &Value::Null,
                (None, _) => {
                    wrong.push(format!("{key}: no such key in the code"));
                    continue;
                }
            };
            let part = parts.get(i).copied().unwrap_or_default();
            // A default that starts in words ("unset (...)") says no value.
            let said = part
                .trim_start()
                .starts_with('`')
                .then(|| code_spans(part).first().copied())
                .flatten();
            let ok = match (said, value) {
                (None, Value::Null) => ["unset", "–", "—"].iter().any(|w| part.contains(w)),
                (Some(said), value) => says(said, value),
                (None, _) => false,
            };
            if !ok {
                wrong.push(format!("{key}: table says {part:?}, the code {value}"));
            }
            if !checked.insert(key.to_owned()) {
                wrong.push(format!("{key}: two rows"));
            }
        }
    }
    assert!(wrong.is_empty(), "docs/configuration.md: {wrong:#?}");
    let words: BTreeSet<String> = IN_WORDS.iter().map(|(k, _)| (*k).to_owned()).collect();
    assert_eq!(
        in_words, words,
        "rows said in words that the table no longer has"
    );
    // Every setting of the code has a row.
    let mut missing = Vec::new();
    leaves(&defaults, "", &mut |path| {
        let covered = checked.iter().any(|c| covers(c, path));
        if !covered {
            missing.push(path.to_owned());
        }
    });
    assert!(
        missing.is_empty(),
        "settings without a row in docs/configuration.md: {missing:#?}"
    );
}

/// Whether the table's `row` key (`<x>` standing for any one name) documents `path`: the key
/// itself, a setting inside it, or a map of the user's own entries that it describes.
fn covers(row: &str, path: &str) -> bool {
    let (row, path): (Vec<&str>, Vec<&str>) = (row.split('.').collect(), path.split('.').collect());
    let same = |r: &&str, p: &&str| r == p || r.starts_with('<');
    (row.len() <= path.len() && row.iter().zip(&path).all(|(r, p)| same(r, p)))
        || (OPEN.contains(&path.join(".").as_str())
            && path.len() < row.len()
            && row.iter().zip(&path).all(|(r, p)| same(r, p)))
}

/// Calls `f` with the dotted path of every value that is not an object of settings.
fn leaves(v: &Value, path: &str, f: &mut dyn FnMut(&str)) {
    match v {
        Value::Object(map) if !map.is_empty() && !OPEN.contains(&path) => {
            for (k, v) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                leaves(v, &p, f);
            }
        }
        _ => f(path),
    }
}

/// An example error of the docs: `config.yaml: KEY must ... (got VALUE) (line N)` or
/// `... not "VALUE" (line N, column M)`, its line breaks undone.
fn example_errors(text: &str) -> Vec<String> {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    code_spans(&text)
        .into_iter()
        .filter(|s| s.starts_with("config.yaml: ") && s.contains("(line "))
        .map(str::to_owned)
        .collect()
}

/// The line of config.yaml that sets the dotted `key`, by indentation.
fn line_of(text: &str, key: &str) -> usize {
    common::yaml_keys(text)
        .into_iter()
        .find_map(|(n, path, _)| (path == key).then_some(n))
        .unwrap_or_else(|| panic!("config.yaml sets no {key}"))
}

#[test]
fn every_example_error_is_what_the_binary_says() {
    let shipped = read(&root().join("config.yaml"));
    let dir = std::env::temp_dir().join(format!("brownout-doc-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut seen = 0;
    for page in pages() {
        for example in example_errors(&read(&page)) {
            seen += 1;
            let key = example["config.yaml: ".len()..].split(' ').next().unwrap();
            let value = match example.split_once("(got ") {
                Some((_, rest)) => rest.split(')').next().unwrap().to_owned(),
                None => example
                    .split_once("not \"")
                    .and_then(|(_, rest)| rest.split('"').next())
                    .unwrap_or_else(|| panic!("{}: no bad value in {example}", page.display()))
                    .to_owned(),
            };
            // The shipped file with that one value changed, as a user would.
            let n = line_of(&shipped, key);
            let mut lines: Vec<String> = shipped.lines().map(str::to_owned).collect();
            let (head, _) = lines[n].split_once(':').unwrap();
            lines[n] = format!("{head}: {value}");
            std::fs::write(dir.join("config.yaml"), lines.join("\n") + "\n").unwrap();
            let out = Command::new(env!("CARGO_BIN_EXE_brownout"))
                .args(["check", "--config", "config.yaml"])
                .current_dir(&dir)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{example}");
            assert_eq!(
                said.trim().trim_start_matches("error: "),
                example,
                "{} gives an example error the binary does not say",
                page.display()
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(seen >= 2, "the docs give example errors ({seen})");
}

/// GitHub's anchor of a heading: lower case, spaces to hyphens, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every `](target)` of a page outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        for (_, rest) in line.match_indices("](").map(|(i, _)| line.split_at(i + 2)) {
            if let Some(target) = rest.split(')').next() {
                out.push(target.to_owned());
            }
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_leads_somewhere() {
    let mut broken = Vec::new();
    let mut seen = 0;
    for page in pages().into_iter().chain([root().join("crates-io.md")]) {
        let text = read(&page);
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            seen += 1;
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !dest.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if !fragment.is_empty()
                && dest.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&dest)).contains(fragment)
            {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
    // A section named in words (`see "Title"`, `"Title" below`) is one of the page's own;
    // `the README's "Title"` one of the README's.
    let mut astray = Vec::new();
    let readme = anchors(&read(&root().join("README.md")));
    for page in pages() {
        let text = read(&page).split_whitespace().collect::<Vec<_>>().join(" ");
        let own: BTreeSet<String> = anchors(&read(&page));
        let quoted = text.split('"').collect::<Vec<_>>();
        for (i, title) in quoted.iter().enumerate().skip(1).step_by(2) {
            let before = quoted[i - 1].trim_end();
            let after = quoted.get(i + 1).map_or("", |a| a.trim_start());
            let names_a_section =
                before.ends_with("see") || after.starts_with("below") || after.starts_with("above");
            let is_heading = title.chars().next().is_some_and(char::is_uppercase);
            if before.ends_with("README's") && is_heading && !readme.contains(&anchor(title)) {
                astray.push(format!(
                    "{}: \"{title}\" is not a section of the README",
                    page.display()
                ));
            }
            if names_a_section && is_heading && !own.contains(&anchor(title)) {
                astray.push(format!(
                    "{}: \"{title}\" is not a section of it",
                    page.display()
                ));
            }
        }
    }
    assert!(astray.is_empty(), "sections named in words: {astray:#?}");
    assert!(seen > 20, "the docs link each other ({seen} links)");
}
