//! The README's "Embed it" blocks build as written: a new cargo project whose dependencies are
//! the toml block's (brownout from this checkout) and whose `src/main.rs` is the rust block,
//! built offline.
// Builds a project with cargo, as a new user would.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;

/// The first fenced block opened by `fence` after `heading`.
fn block(readme: &str, heading: &str, fence: &str) -> String {
    let section = readme
        .split_once(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in the README"))
        .1;
    let body = section
        .split_once(&format!("{fence}\n"))
        .unwrap_or_else(|| panic!("no {fence} block after {heading:?}"))
        .1;
    body.split_once("```\n")
        .expect("the block ends")
        .0
        .to_owned()
}

#[test]
fn the_embed_snippet_builds_in_a_new_project_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let toml = block(&readme, "## Embed it", "```toml");
    let rust = block(&readme, "## Embed it", "```rust");
    // The one change: brownout from this checkout instead of crates.io.
    let from_crates_io = r#"brownout = "0.1""#;
    assert!(toml.contains(from_crates_io), "{toml}");
    let toml = toml.replace(
        from_crates_io,
        &format!(
            r#"brownout = {{ path = {:?} }}"#,
            root.display().to_string()
        ),
    );
    let dir = std::env::temp_dir().join(format!("brownout-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"embed-from-readme\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n\n{toml}"
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/main.rs"), rust).unwrap();
    // The same dependency versions as this checkout (offline: nothing new to fetch).
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let out = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet"])
        .env("CARGO_TARGET_DIR", root.join("target/readme"))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the README's blocks do not build:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_crates_io_page_links_nothing_it_cannot_show() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("crates-io.md")).unwrap();
    // Relative links and images resolve against a repository crates.io does not have.
    for (i, _) in page.match_indices("](") {
        let target = &page[i + 2..];
        assert!(
            target.starts_with("https://") || target.starts_with("http://"),
            "a relative link: {}",
            &target[..target.find(')').unwrap_or(target.len())]
        );
    }
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("readme = \"crates-io.md\""));
}
