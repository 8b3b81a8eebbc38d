//! Reloading the configuration file (SIGHUP, `Brownout::reload_config`) and talking to the
//! operator: which sections a reload may change, and the SIGHUP listener.

use super::operator::OpsMsg;
use super::{Applied, Change, ChangeError};
use crate::config::{Config, ConfigError};
use crate::logging::{notice, one_line, Level};
use std::path::PathBuf;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// Sends `change` to the operator and waits for its answer.
pub(crate) async fn send(
    operator: &mpsc::Sender<OpsMsg>,
    change: Change,
    source: String,
) -> Result<Applied, ChangeError> {
    let (reply, answer) = oneshot::channel();
    let msg = OpsMsg::Apply {
        change,
        source,
        reply,
    };
    operator
        .send(msg)
        .await
        .map_err(|_| ChangeError::NotRunning)?;
    answer.await.map_err(|_| ChangeError::NotRunning)?
}

/// Reads the configuration file again and asks the operator to apply it.
pub(crate) async fn reload(
    file: Option<&ConfigFile>,
    operator: &mpsc::Sender<OpsMsg>,
    source: &str,
) -> Result<Applied, ChangeError> {
    let file = file.ok_or(ChangeError::NoFile)?;
    let sections: Vec<&str> = file.sections.iter().map(String::as_str).collect();
    let config = Config::load_with_sections(&file.path, &sections)?;
    send(
        operator,
        Change::Reload(Box::new(config)),
        source.to_owned(),
    )
    .await
}

/// The file the configuration came from, and the program's own sections in it (read again
/// with them).
#[derive(Debug, Clone)]
pub(crate) struct ConfigFile {
    pub(crate) path: PathBuf,
    pub(crate) sections: Vec<String>,
}

/// Reloads the configuration file on every SIGHUP until shutdown. Once installed, SIGHUP never
/// terminates the process again: tokio keeps its handler for the life of the process.
#[cfg(unix)]
pub(crate) fn spawn_reloader(
    file: Option<ConfigFile>,
    operator: mpsc::Sender<OpsMsg>,
    mut shutdown: watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!("cannot listen for SIGHUP, reloads are off: {e}");
            return None;
        }
    };
    Some(tokio::spawn(async move {
        loop {
            tokio::select! {
                got = hangups.recv() => if got.is_none() { break },
                _ = shutdown.changed() => break,
            }
            let shown = file
                .as_ref()
                .map_or_else(|| "(no file)".to_owned(), |f| f.path.display().to_string());
            match reload(file.as_ref(), &operator, "signal").await {
                Ok(applied) => notice(
                    Level::Info,
                    &format!(
                        "SIGHUP: reloaded {shown} (settings version {})",
                        applied.version
                    ),
                ),
                Err(e) => notice(
                    Level::Error,
                    &format!(
                        "SIGHUP: {shown} not reloaded, the running settings stay: {}",
                        one_line(&e.to_string())
                    ),
                ),
            }
        }
    }))
}

/// Sections of the configuration file that are read once, at start: a reload that changes one
/// is refused by the key's name.
pub(super) fn check_reloadable(running: &Config, new: &Config) -> Result<(), ConfigError> {
    let (a, b) = (&running.admin, &new.admin);
    let (s, t) = (&running.store, &new.store);
    let fixed = [
        ("admin.bind", a.bind == b.bind),
        ("admin.token_env", a.token_env == b.token_env),
        ("admin.token_file", a.token_file == b.token_file),
        ("admin.overrides_file", a.overrides_file == b.overrides_file),
        (
            "admin.reload_on_sighup",
            a.reload_on_sighup == b.reload_on_sighup,
        ),
        ("admin.body_timeout", a.body_timeout == b.body_timeout),
        ("store.kind", s.kind == t.kind),
        ("store.url", s.url == t.url),
        ("store.nodes", s.nodes == t.nodes),
        ("store.timeout", s.timeout == t.timeout),
        ("store.key_prefix", s.key_prefix == t.key_prefix),
    ];
    let key = match fixed.iter().find(|(_, same)| !same) {
        Some((key, _)) => Some((*key).to_owned()),
        // The program's own sections: it read them at start, and brownout cannot apply them.
        None => running.app.first_change(&new.app),
    };
    match key {
        Some(key) => Err(ConfigError::invalid(
            key,
            "cannot change on a reload (it is read at start); restart to change it, or put the running value back",
        )),
        None => Ok(()),
    }
}
