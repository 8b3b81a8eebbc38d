//! `examples/embed.rs` is the README's embedding snippet. `cargo test` builds it; this runs it
//! as an operator would: the generated admin token reaches stderr (or `admin.token_file`),
//! SIGHUP reloads the file and never ends the process.
// Tests and benchmarks wait and measure in real time; the library reads time only through
// its injected Clock (clippy.toml).
#![allow(clippy::disallowed_methods)]

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// target/<profile>/examples/<name>, beside this test's own directory (target/<profile>/deps).
fn example(name: &str) -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let profile = me.parent().and_then(|deps| deps.parent()).unwrap();
    let exe = profile.join("examples").join(name);
    assert!(
        exe.exists(),
        "{} is missing: `cargo test` builds the examples",
        exe.display()
    );
    exe
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

struct Running {
    child: Child,
    stderr: mpsc::Receiver<String>,
}

impl Running {
    fn start(config: &std::path::Path, app: SocketAddr) -> Self {
        Self::spawn(
            Command::new(example("embed"))
                .arg(config)
                .arg(app.to_string()),
        )
    }

    fn spawn(command: &mut Command) -> Self {
        let mut child = command
            .env_remove("BROWNOUT_ADMIN_TOKEN")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, stderr) = mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self { child, stderr }
    }

    /// The first stderr line containing `needle`.
    fn line_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!("no stderr line with {needle:?}: {e}"),
            }
        }
    }

    fn hangup(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn http(addr: SocketAddr, path: &str, token: Option<&str>) -> u16 {
    request(addr, "GET", path, token)
}

fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn yaml(admin: SocketAddr, extra_admin: &str, request_rate: &str) -> String {
    format!(
        "admin:\n  bind: {admin}\n{extra_admin}limiters:\n  request_rate:\n{request_rate}  worker_utilization:\n    mode: off\n"
    )
}

#[test]
fn the_embedded_app_prints_its_token_and_reloads_on_sighup() {
    let dir = std::env::temp_dir().join(format!("brownout-embed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    let (admin, app) = (free_port(), free_port());
    std::fs::write(&config, yaml(admin, "", "    mode: off\n")).unwrap();
    let mut running = Running::start(&config, app);

    // No BROWNOUT_ADMIN_TOKEN and no tracing subscriber: the token still reaches the operator.
    let line = running.line_with("admin token for this run:");
    let token = line.rsplit(' ').next().unwrap().to_owned();
    assert_eq!(token.len(), 64, "{line}");
    wait_for("the app", || http(app, "/", None) == 200);
    assert_eq!(http(admin, "/v1/state", Some(&token)), 200);
    assert_eq!(http(admin, "/v1/state", None), 401);

    // SIGHUP reloads the file: one credit per IP now.
    let limited = "    mode: enforce\n    rate: 0.001\n    burst: 1\n";
    std::fs::write(&config, yaml(admin, "", limited)).unwrap();
    running.hangup();
    wait_for("the reload", || http(app, "/", None) == 429);
    assert!(running.alive(), "SIGHUP must not end the process");

    // An invalid file: the process keeps running on its settings, and says why on one line.
    std::fs::write(&config, "limiters:\n  request_rate:\n    rate: fast\n").unwrap();
    running.hangup();
    let line = running.line_with("not reloaded");
    assert!(
        line.contains("limiters.request_rate.rate must be a number"),
        "{line}"
    );
    assert!(running.alive());
    assert_eq!(http(app, "/", None), 429);
    drop(running);

    // With admin.token_file, the token goes to the file (0600), not to stderr.
    let token_file = dir.join("token");
    let extra = format!("  token_file: {}\n", token_file.display());
    std::fs::write(&config, yaml(admin, &extra, "    mode: off\n")).unwrap();
    let running = Running::start(&config, app);
    let line = running.line_with("the generated admin token is in");
    assert!(line.contains(&token_file.display().to_string()), "{line}");
    wait_for("the app", || http(app, "/", None) == 200);
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(token.trim().len(), 64);
    assert!(!line.contains(token.trim()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert_eq!(http(admin, "/v1/state", Some(token.trim())), 200);
    drop(running);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_config_file_is_reported_as_one_sentence_not_debug() {
    let dir = std::env::temp_dir().join(format!("brownout-embed-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "limiters:\n  fleet_usage:\n    capacity: eight\n").unwrap();
    let missing = dir.join("missing.yaml");
    for (file, says) in [
        (
            &bad,
            format!(
                "Error: {}: limiters.fleet_usage.capacity must be a whole number",
                bad.display()
            ),
        ),
        (
            &missing,
            format!("Error: cannot read config file {}: ", missing.display()),
        ),
    ] {
        let out = Command::new(example("embed"))
            .arg(file)
            .arg(free_port().to_string())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with(&says), "{stderr}");
        assert!(
            !stderr.contains("InFile {") && !stderr.contains("Io {"),
            "{stderr}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_config_from_code_example_limits_per_key_with_route_costs() {
    let app = free_port();
    let _running = Running::spawn(
        Command::new(example("from_code"))
            .arg(app.to_string())
            .current_dir(std::env::temp_dir()),
    );
    wait_for("the app", || http(app, "/", None) == 200);
    // One client (its IP): 100 credits, a charge costs 5, so 20 charges pass at once; the
    // bucket refills 20 credits a second, so the next one is refused within a few requests.
    let codes: Vec<u16> = (0..40)
        .map(|_| request(app, "POST", "/v1/charges", None))
        .collect();
    let passed = codes.iter().take_while(|&&c| c == 200).count();
    assert!((19..=25).contains(&passed), "{codes:?}");
    assert_eq!(codes[passed], 429, "{codes:?}");
}

#[test]
fn library_users_compile_none_of_the_cli_dependencies_by_default() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "brownout",
            "-e",
            "normal",
            "--offline",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.contains("actix-web"), "{tree}");
    for name in [
        "clap",
        "awc",
        "tracing-subscriber",
        "sysinfo",
        "plotters",
        "congestion-limiter",
        "redis",
    ] {
        assert!(
            !tree.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{name} is compiled for library users:\n{tree}"
        );
    }
}

/// Every mode `httpbench` serves or drives.
const HTTPBENCH_MODES: [&str; 5] = [
    "bare",
    "brownout",
    "brownout-nohdr",
    "brownout-wu",
    "governor",
];

#[test]
fn httpbench_serves_ok_in_every_mode_and_reports_brownouts_counters() {
    let exe = example("httpbench");
    for mode in HTTPBENCH_MODES {
        let addr = free_port();
        let child = Command::new(&exe)
            .args([
                "serve",
                "--mode",
                mode,
                "--port",
                &addr.port().to_string(),
                "--workers",
                "1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for("httpbench", || http(addr, "/", None) == 200);
        for _ in 0..20 {
            assert_eq!(http(addr, "/", None), 200, "{mode}");
        }
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if mode.starts_with("brownout") {
            let line = err
                .lines()
                .find(|l| l.starts_with("httpbench: brownout counters: "))
                .unwrap_or_else(|| panic!("{mode}: no counters line in {err}"));
            assert!(
                line.contains("rejected=0 dark_rejected=0 failed_open=0 rejections=0 fail_opens=0"),
                "{line}"
            );
            let allowed: f64 = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("allowed="))
                .unwrap()
                .parse()
                .unwrap();
            assert!(allowed >= 21.0, "{line}");
        } else {
            assert!(!err.contains("brownout counters"), "{mode}: {err}");
        }
    }
}

/// `httpbench calls`: the in-process driver callgrind counts instructions with sends every
/// request through each mode's app and gets 200s (it asserts each answer itself).
#[test]
fn httpbench_calls_every_mode_in_process() {
    let exe = example("httpbench");
    for mode in HTTPBENCH_MODES {
        let out = Command::new(&exe)
            .args(["calls", "--mode", mode, "--requests", "50"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
