//! The library's module graph has no cycles: none between top-level modules, and none between
//! files (a module and its own ancestors aside: a child always sees its parent). Read from the
//! `crate::`, `super::` and `self::` paths of each file's code (its `#[cfg(test)]` module
//! aside), so a new cycle fails here with the files that form it. docs/ARCHITECTURE.md lists
//! the layers this keeps.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

/// Every file of `src/`, by module path (`src/a/b.rs` and `src/a/b/mod.rs` are `a::b`).
fn files(dir: &Path, root: &Path, out: &mut BTreeMap<Module, String>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files(&path, root, out);
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .expect("under src")
            .with_extension("");
        let mut module: Module = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if matches!(
            module.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            module.pop();
        }
        // Test files of a module (`tests.rs`, `*_tests.rs`) are test code.
        if module
            .last()
            .is_some_and(|m| m == "tests" || m.ends_with("_tests"))
        {
            continue;
        }
        out.insert(module, std::fs::read_to_string(&path).expect("read file"));
    }
}

/// The code of a file without its comments and its test module.
fn code(text: &str) -> String {
    let cut = text
        .find("#[cfg(test)]\nmod ")
        .map_or(text, |at| &text[..at]);
    cut.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a file names: `crate::a::b`, `super::a`, `self::a`, each with the members of a
/// `{…}` group that follows (one level).
fn paths(module: &Module, code: &str) -> Vec<Module> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_word(bytes[i - 1]);
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let base = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|b| rest.starts_with(b));
        let Some(base) = base.filter(|_| starts_word) else {
            i += 1;
            continue;
        };
        let mut start: Module = match base {
            "crate::" => Vec::new(),
            "super::" => module[..module.len().saturating_sub(1)].to_vec(),
            _ => module.clone(),
        };
        i += base.len();
        let mut segs = Vec::new();
        loop {
            let word: String = bytes[i..].iter().take_while(|c| is_word(**c)).collect();
            if word.is_empty() {
                break;
            }
            i += word.len();
            if word == "super" && segs.is_empty() {
                start.pop();
            } else {
                segs.push(word);
            }
            if bytes[i..].starts_with(&[':', ':']) {
                i += 2;
            } else {
                break;
            }
        }
        let mut path = start.clone();
        path.extend(segs);
        if bytes.get(i) == Some(&'{') {
            let group: String = bytes[i + 1..].iter().take_while(|c| **c != '}').collect();
            for member in group.split(',') {
                let member = member.split(" as ").next().unwrap_or("").trim();
                let mut p = path.clone();
                p.extend(
                    member
                        .split("::")
                        .filter(|s| !s.is_empty() && *s != "self" && !s.contains('{'))
                        .map(str::to_owned),
                );
                out.push(p);
            }
        }
        out.push(path);
    }
    out
}

/// The file a path lands in: its longest prefix that is a module.
fn resolve<'a>(files: &'a BTreeMap<Module, String>, path: &[String]) -> Option<&'a Module> {
    (1..=path.len())
        .rev()
        .find_map(|n| files.get_key_value(&path[..n]).map(|(k, _)| k))
}

fn ancestor(a: &Module, b: &Module) -> bool {
    a.len() < b.len() && b[..a.len()] == a[..]
}

/// The strongly connected components with more than one node.
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    // Two nodes are in one cycle when each reaches the other.
    let reach = |from: &Module| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for next in edges.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&Module, BTreeSet<Module>> =
        edges.keys().map(|n| (n, reach(n))).collect();
    let mut out: Vec<Vec<Module>> = Vec::new();
    let mut placed = BTreeSet::new();
    for (n, from_n) in &reached {
        if placed.contains(*n) || !from_n.contains(*n) {
            continue;
        }
        let comp: Vec<Module> = from_n
            .iter()
            .filter(|m| reached.get(m).is_some_and(|r| r.contains(*n)))
            .cloned()
            .collect();
        placed.extend(comp.iter().cloned());
        out.push(comp);
    }
    out
}

fn graph() -> (
    BTreeMap<Module, BTreeSet<Module>>,
    BTreeMap<Module, BTreeSet<Module>>,
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = BTreeMap::new();
    files(&root, &root, &mut all);
    let mut by_file: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    let mut top: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in &all {
        for path in paths(module, &code(text)) {
            let Some(target) = resolve(&all, &path) else {
                continue;
            };
            if target == module || target.is_empty() || module.is_empty() {
                continue;
            }
            if target[0] != module[0] {
                top.entry(vec![module[0].clone()])
                    .or_default()
                    .insert(vec![target[0].clone()]);
            }
            if !ancestor(target, module) && !ancestor(module, target) {
                by_file
                    .entry(module.clone())
                    .or_default()
                    .insert(target.clone());
            }
        }
    }
    (by_file, top)
}

fn show(cycles: &[Vec<Module>]) -> String {
    cycles
        .iter()
        .map(|c| {
            c.iter()
                .map(|m| m.join("/"))
                .collect::<Vec<_>>()
                .join(" <-> ")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn no_cycles_between_top_level_modules() {
    let (_, top) = graph();
    assert!(top.len() > 5, "the graph was read: {top:?}");
    let found = cycles(&top);
    assert!(found.is_empty(), "top-level cycles: {}", show(&found));
}

#[test]
fn no_cycles_between_files() {
    let (by_file, _) = graph();
    assert!(by_file.len() > 20, "the graph was read");
    let found = cycles(&by_file);
    assert!(found.is_empty(), "file cycles: {}", show(&found));
}

#[test]
fn a_cycle_is_found() {
    let m = |s: &str| vec![s.to_owned()];
    let mut edges = BTreeMap::new();
    edges.insert(m("a"), BTreeSet::from([m("b")]));
    edges.insert(m("b"), BTreeSet::from([m("c")]));
    edges.insert(m("c"), BTreeSet::from([m("a")]));
    edges.insert(m("d"), BTreeSet::from([m("a")]));
    assert_eq!(cycles(&edges), vec![vec![m("a"), m("b"), m("c")]]);
    let parsed = paths(
        &vec!["http".to_owned(), "fleet".to_owned()],
        "use super::{body::TrackedBody, ratelimit};\nlet x = crate::engine::judge(1);",
    );
    assert!(parsed.contains(&vec!["http".into(), "body".into(), "TrackedBody".into()]));
    assert!(parsed.contains(&vec!["http".into(), "ratelimit".into()]));
    assert!(parsed.contains(&vec!["engine".into(), "judge".into()]));
}
