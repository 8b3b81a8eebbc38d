//! The README's "Embed it" blocks build as written: a new cargo project whose dependencies are
//! the toml block's (brownout from this checkout) and whose `src/main.rs` is the rust block,
//! built offline, and run on the shipped config.yaml until the app answers.
// Builds a project with cargo and runs it, as a new user would.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// Every fenced block opened by `fence` in the section under `heading` (up to the next `## `).
fn blocks(readme: &str, heading: &str, fence: &str) -> Vec<String> {
    let section = readme
        .split_once(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in the README"))
        .1;
    let section = section.split_once("\n## ").map_or(section, |(s, _)| s);
    section
        .split(&format!("{fence}\n"))
        .skip(1)
        .map(|b| b.split_once("```\n").expect("the block ends").0.to_owned())
        .collect()
}

#[test]
fn the_embed_programs_build_in_a_new_project_and_answer_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let toml = block(&readme, "## Embed it", "```toml");
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
    // The same dependency versions as this checkout (offline: nothing new to fetch).
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    // The shipped config.yaml as the README says to copy it, its ports moved to free ones so
    // that the test never meets another server.
    let admin = free_port();
    let shipped = std::fs::read_to_string(root.join("config.yaml")).unwrap();
    assert!(
        !shipped.contains("\ndemo:"),
        "config.yaml is the library's settings only"
    );
    let config = shipped.replacen("bind: 127.0.0.1:9090", &format!("bind: {admin}"), 1);
    assert_ne!(config, shipped, "admin.bind is written in config.yaml");
    std::fs::write(dir.join("config.yaml"), config).unwrap();
    let programs: Vec<String> = blocks(&readme, "## Embed it", "```rust")
        .into_iter()
        .filter(|b| b.contains("fn main"))
        .collect();
    assert_eq!(programs.len(), 2, "the quick start and the file's program");
    for program in programs {
        std::fs::write(dir.join("src/main.rs"), &program).unwrap();
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
        let app = free_port();
        let with_file = program.contains("Config::load");
        let mut args = vec![app.to_string()];
        if with_file {
            args.insert(0, "config.yaml".into());
        }
        // The quick start, abused as an attacker would: one address inventing a key per
        // request meets the per-IP ceiling that comes with the rate limit by default.
        let abuse = (!with_file).then_some(invent_keys as fn(SocketAddr));
        let (answer, admin_answered) = run_until_it_answers(root, &dir, &args, abuse);
        assert!(answer.ends_with("hi"), "{answer}");
        if with_file {
            assert!(admin_answered, "the admin API of config.yaml answers");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The README's quick start (`.rate_limit(20.0, 100)`, nothing else) at `app`, sent a fresh
/// API key with every request from one address: each key has a full bucket of its own, but
/// the address is refused past its ceiling (ten clients' worth: a burst of 1,000 and 200 a
/// second), by name.
fn invent_keys(app: SocketAddr) {
    let start = Instant::now();
    let (mut admitted, mut refusal) = (0u32, None);
    for i in 0..6_000 {
        if start.elapsed() > Duration::from_secs(20) {
            break;
        }
        let Some(answer) = request(app, &format!("GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_live_invented_{i}\r\nConnection: close\r\n\r\n")) else {
            continue;
        };
        if answer.starts_with("HTTP/1.1 200") {
            admitted += 1;
        } else {
            refusal = Some(answer);
            break;
        }
    }
    let refusal = refusal.expect("one address inventing keys is refused");
    assert!(refusal.starts_with("HTTP/1.1 429"), "{refusal}");
    let lower = refusal.to_ascii_lowercase();
    assert!(lower.contains("ratelimit: \"per_ip\";r=0"), "{refusal}");
    let most = 1_000.0 + 200.0 * start.elapsed().as_secs_f64() + 1.0;
    println!(
        "one address inventing keys: {admitted} admitted in {:?}, then {}",
        start.elapsed(),
        refusal.lines().next().unwrap_or_default()
    );
    assert!(
        (1_000..=most as u32).contains(&admitted),
        "{admitted} admitted before the ceiling (at most {most:.0})"
    );
}

/// Runs the program built in `dir` with `args` (the app's address last) until `GET /`
/// answers 200 (at most 30 s), then `then` on its address while it runs: its answer, and
/// whether the admin API of its config.yaml answered `/healthz` meanwhile.
fn run_until_it_answers(
    root: &Path,
    dir: &Path,
    args: &[String],
    then: Option<fn(SocketAddr)>,
) -> (String, bool) {
    let app: SocketAddr = args.last().unwrap().parse().unwrap();
    let config = std::fs::read_to_string(dir.join("config.yaml")).unwrap();
    let admin: SocketAddr = config
        .split_once("bind: ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap();
    let exe = root.join("target/readme/debug/embed-from-readme");
    let mut child = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env("BROWNOUT_ADMIN_TOKEN", "a-token-for-this-test-only")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut answer = None;
    while Instant::now() < deadline && answer.is_none() {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("the program exited ({status}): {err}");
        }
        answer = get(app, "/").filter(|a| a.starts_with("HTTP/1.1 200"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let health = get(admin, "/healthz").is_some_and(|a| a.ends_with("ok"));
    if let (Some(then), Some(_)) = (then, &answer) {
        then(app);
    }
    let _ = child.kill();
    let _ = child.wait();
    (answer.expect("the program answers within 30 s"), health)
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `GET path` over a plain connection: the whole answer, or `None` when nothing answers.
fn get(addr: SocketAddr, path: &str) -> Option<String> {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )
}

/// `raw` sent over a plain connection: the whole answer, or `None` when nothing answers.
fn request(addr: SocketAddr, raw: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(raw.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
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

/// Every admin example in the README (`curl … -d '<json>' localhost:9090<path>` and
/// `admin patch '<json>'`), as (method, path, body).
fn admin_examples(readme: &str) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    for line in readme.lines() {
        let Some((_, rest)) = line.split_once("-d '") else {
            if let Some((_, rest)) = line.split_once("admin patch '") {
                let body = rest.split_once('\'').expect("the body ends").0;
                out.push(("PATCH", "/v1/config".to_owned(), body.to_owned()));
            }
            continue;
        };
        let (body, after) = rest.split_once('\'').expect("the body ends");
        let path = after.trim().trim_start_matches("localhost:9090").to_owned();
        let method = if path == "/v1/config" { "PATCH" } else { "PUT" };
        out.push((method, path, body.to_owned()));
    }
    out
}

#[actix_web::test]
async fn every_admin_example_is_accepted_by_the_shipped_config() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let examples = admin_examples(&readme);
    assert!(examples.len() >= 4, "{examples:?}");
    let config = brownout::Config::load(root.join("config.yaml")).unwrap();
    let brownout = brownout::Brownout::builder(config)
        .admin_token("a-token-for-this-test-only")
        .build()
        .unwrap();
    brownout.start().unwrap();
    let admin = brownout
        .admin_server_on("127.0.0.1:0".parse().unwrap())
        .unwrap();
    actix_web::rt::spawn(admin.server);
    let client = awc::Client::new();
    for (method, path, body) in examples {
        let mut res = client
            .request(
                method.parse().unwrap(),
                format!("http://{}{path}", admin.local_addr),
            )
            .bearer_auth("a-token-for-this-test-only")
            .insert_header(("content-type", "application/json"))
            .send_body(body.clone())
            .await
            .unwrap();
        let answer = res.body().await.unwrap();
        assert_eq!(
            res.status(),
            200,
            "{method} {path} {body}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
    brownout.shutdown().await;
}
