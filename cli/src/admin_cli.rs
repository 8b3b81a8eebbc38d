//! `brownout admin …`: a small client for the admin API, so operators need not hand-craft curl
//! calls. It reads the bearer token from the environment variable of `admin.token_env`.

use brownout::Config;
use clap::Subcommand;
use serde_json::Value;
use std::process::ExitCode;

/// What to ask the admin API.
#[derive(Subcommand)]
pub enum AdminCommand {
    /// Show the live state (modes, controller, in-flight requests).
    State,
    /// Show the live limiter settings and their version.
    Config,
    /// Set a limiter's mode: enforce, dark or off (optionally for --ttl seconds).
    Mode {
        /// request_rate, concurrent_requests, fleet_usage, adaptive_concurrency or worker_utilization.
        limiter: String,
        /// enforce, dark or off.
        mode: String,
        /// Revert to the previous mode after this many seconds.
        #[arg(long)]
        ttl: Option<u64>,
    },
    /// Engage (on) or release (off) the kill switch: every limiter off at once.
    Kill {
        /// on or off.
        state: String,
    },
    /// Apply a JSON merge patch to the settings document (as `admin config` shows it), e.g.
    /// '{"limiters":{"request_rate":{"rate":50}}}' or '{"kill_switch":true}'.
    Patch {
        /// The patch.
        json: String,
        /// Only apply if the settings are still at this version (from `admin config`): `5`, or
        /// the ETag as the HTTP API gives it, `"5"`.
        #[arg(long, value_parser = etag_version)]
        if_match: Option<u64>,
    },
    /// Show the last 256 changes.
    Audit,
}

/// Runs one command against `url` (default: `http://<admin.bind>`).
pub fn run(config: &Config, url: Option<String>, command: AdminCommand) -> ExitCode {
    let base = url.unwrap_or_else(|| format!("http://{}", config.admin.bind));
    let env = &config.admin.token_env;
    let Some(token) = token(config) else {
        eprintln!("error: set {env} to the admin token (or admin.token_file to a file holding it)");
        return ExitCode::from(2);
    };
    let request = match build(&command) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = actix_web::rt::System::new().block_on(send(&base, &token, request));
    match outcome {
        Ok((status, body)) if (200..300).contains(&status) => {
            print_quietly(&serde_json::to_string_pretty(&body).unwrap_or_default())
        }
        Ok((status, body)) => {
            let detail = body["detail"].as_str().unwrap_or("(no detail)");
            // The HTTP API's advice, in this tool's words: the token was sent, and the
            // command is named as it is run from a checkout too.
            let detail = if status == 401 {
                format!("the admin API at {base} did not accept the token in {env} (or admin.token_file): is it this server's?")
            } else {
                detail.replace(
                    "Fetch GET /v1/config",
                    "Run `brownout admin config` (from a checkout: `cargo run --release -- admin config`)",
                )
            };
            eprintln!("error: {status}: {detail}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: cannot reach the admin API at {base}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A settings version as `--if-match` takes it: `5`, or the ETag `"5"` (a weak `W/"5"` too).
fn etag_version(s: &str) -> Result<u64, String> {
    let bare = s.trim().trim_start_matches("W/").trim_matches('"');
    bare.parse()
        .map_err(|_| format!("must be a settings version like 5 or \"5\" (got {s})"))
}

/// The token from the variable named by `admin.token_env`, else from `admin.token_file`.
fn token(config: &Config) -> Option<String> {
    let from_env = std::env::var(&config.admin.token_env).ok();
    let from_file = || {
        let path = config.admin.token_file.as_ref()?;
        std::fs::read_to_string(path).ok()
    };
    from_env
        .or_else(from_file)
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// Prints `text` to stdout; a reader that went away (`| head`) is not an error.
fn print_quietly(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write the answer: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Request {
    method: &'static str,
    path: String,
    body: Option<Value>,
    if_match: Option<u64>,
}

fn build(command: &AdminCommand) -> Result<Request, String> {
    let get = |path: &str| Request {
        method: "GET",
        path: path.to_owned(),
        body: None,
        if_match: None,
    };
    Ok(match command {
        AdminCommand::State => get("/v1/state"),
        AdminCommand::Config => get("/v1/config"),
        AdminCommand::Audit => get("/v1/audit"),
        AdminCommand::Mode { limiter, mode, ttl } => Request {
            method: "PUT",
            path: format!("/v1/limiters/{limiter}/mode"),
            body: Some(serde_json::json!({"mode": mode, "ttl_seconds": ttl})),
            if_match: None,
        },
        AdminCommand::Kill { state } => {
            let engaged = match state.as_str() {
                "on" => true,
                "off" => false,
                other => return Err(format!("kill takes on or off, not {other:?}")),
            };
            Request {
                method: "PUT",
                path: "/v1/kill-switch".into(),
                body: Some(serde_json::json!({"engaged": engaged})),
                if_match: None,
            }
        }
        AdminCommand::Patch { json, if_match } => Request {
            method: "PATCH",
            path: "/v1/config".into(),
            body: Some(
                serde_json::from_str(json).map_err(|e| format!("the patch is not JSON: {e}"))?,
            ),
            if_match: *if_match,
        },
    })
}

async fn send(base: &str, token: &str, r: Request) -> Result<(u16, Value), String> {
    let client = awc::Client::new();
    let method = r.method.parse().map_err(|e| format!("{e}"))?;
    let mut req = client
        .request(method, format!("{base}{}", r.path))
        .bearer_auth(token);
    if let Some(v) = r.if_match {
        req = req.insert_header(("If-Match", format!("\"{v}\"")));
    }
    let sent = match r.body {
        Some(body) => {
            req.insert_header(("Content-Type", "application/json"))
                .send_body(body.to_string())
                .await
        }
        None => req.send().await,
    };
    let mut res = sent.map_err(|e| e.to_string())?;
    let bytes = res.body().limit(1 << 22).await.map_err(|e| e.to_string())?;
    Ok((
        res.status().as_u16(),
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}
