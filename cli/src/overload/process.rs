//! A demo process of this binary for one arm of `bench overload`: started on a config file,
//! on loopback ports it reports, stopped when dropped; signalled for the capacity drop.

use brownout_cli::config::CliConfig;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A demo process of this binary, stopped when dropped.
pub(super) struct DemoProcess {
    child: Child,
    pub(super) app: String,
    pub(super) admin: String,
    pub(super) token: String,
}

impl Drop for DemoProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl DemoProcess {
    /// Starts `config` (on `cpus`, if given) and waits (at most 30 s) for it to say where it
    /// listens; its log goes to `log`.
    pub(super) fn start(
        config: &CliConfig,
        file: &Path,
        log: &Path,
        cpus: Option<&str>,
    ) -> Result<Self, String> {
        let json = serde_json::to_string_pretty(config).map_err(|e| e.to_string())?;
        // JSON is YAML: the demo reads it like config.yaml.
        std::fs::write(file, json).map_err(|e| format!("{}: {e}", file.display()))?;
        let token = format!(
            "{:016x}{:016x}",
            brownout::rng::os_seed(),
            brownout::rng::os_seed()
        );
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut command = match cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(cpus).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = command
            .arg("--config")
            .arg(file)
            .arg("run")
            .env(&config.brownout.admin.token_env, &token)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the demo: {e}"))?;
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::fs::File::create(log).map_err(|e| e.to_string())?;
        std::thread::spawn(move || {
            let mut log = std::io::BufWriter::new(log);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                for (what, marker) in [
                    ("app", "demo app listening on "),
                    ("admin", "admin API listening on "),
                ] {
                    if let Some(i) = line.find(marker) {
                        let url: String = line[i + marker.len()..]
                            .split_whitespace()
                            .take(1)
                            .collect();
                        let _ = tx.send((what, url));
                    }
                }
                let _ = std::io::Write::write_all(&mut log, format!("{line}\n").as_bytes());
            }
        });
        let (mut app, mut admin) = (None, None);
        while app.is_none() || admin.is_none() {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(("app", url)) => app = Some(url),
                Ok((_, url)) => admin = Some(url),
                Err(_) => return Err("the demo did not start within 30 s (see its log)".into()),
            }
        }
        let strip = |s: String| s.trim_end_matches(|c: char| !c.is_ascii_digit()).to_owned();
        Ok(Self {
            child,
            app: strip(app.expect("set")),
            admin: strip(admin.expect("set")),
            token,
        })
    }

    /// Sends SIGUSR1 (capacity drop) or SIGUSR2 (restored) to the demo.
    pub(super) fn signal(&self, slow: bool) {
        let sig = if slow { "-USR1" } else { "-USR2" };
        let _ = Command::new("kill")
            .arg(sig)
            .arg(self.child.id().to_string())
            .status();
    }
}
