//! Helpers shared by the binary's integration tests.
#![allow(dead_code)] // each test file uses its share

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every `key:` line of a YAML file as written (comments, blank lines and list items left
/// out): its index, its dotted key by indentation, and what follows the colon.
pub fn yaml_keys(text: &str) -> Vec<(usize, String, &str)> {
    let mut stack: Vec<(usize, &str)> = Vec::new();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        let Some((key, rest)) = trimmed.split_once(':') else {
            continue;
        };
        let indent = line.len() - trimmed.len();
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.trim_matches('"')));
        let path: Vec<&str> = stack.iter().map(|(_, k)| *k).collect();
        out.push((n, path.join("."), rest));
    }
    out
}
