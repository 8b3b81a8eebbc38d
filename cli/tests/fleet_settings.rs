//! Fleet-wide settings (`admin.scope: fleet`): three demo processes (the `brownout` binary)
//! sharing one redis-server of the tests' own on loopback, driven through their admin APIs.
//! A change made on one instance is in force on the others within a second; a timed change
//! reverts once for the fleet; If-Match holds across instances; a restarted instance comes
//! back with the fleet's settings; a change made while Redis is down stays local, is reported,
//! and becomes the fleet's when Redis is back.

#![allow(clippy::disallowed_methods)] // real processes, real time

#[path = "../../tests/redis_server/mod.rs"]
mod redis_server;

use redis_server::{free_port, RedisServer};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "test-token";

/// One demo process in fleet scope.
struct Instance {
    child: Option<Child>,
    name: &'static str,
    admin: String,
    config: PathBuf,
    redis_port: u16,
    /// More configuration (YAML appended to the file).
    extra: String,
}

impl Instance {
    /// Starts instance `name` on Redis at `redis_port`, with its files under `dir`.
    fn start(name: &'static str, redis_port: u16, dir: &std::path::Path) -> Self {
        Self::with(name, redis_port, dir, "")
    }

    /// [`start`](Self::start) with more configuration (YAML appended to the file).
    fn with(name: &'static str, redis_port: u16, dir: &std::path::Path, extra: &str) -> Self {
        let mut instance = Self {
            child: None,
            name,
            admin: String::new(),
            config: dir.join(format!("{name}.yaml")),
            redis_port,
            extra: extra.to_owned(),
        };
        instance.configure();
        instance.spawn();
        instance
    }

    /// Writes its config file, with free loopback ports for the admin API and the demo.
    fn configure(&mut self) {
        let admin = format!("127.0.0.1:{}", free_port());
        let (name, redis_port, extra) = (self.name, self.redis_port, &self.extra);
        std::fs::write(
            &self.config,
            format!(
                "admin:\n  bind: \"{admin}\"\n  instance: \"{name}\"\n\
                 store:\n  kind: redis\n  url: \"redis://127.0.0.1:{redis_port}/\"\n  timeout: 200ms\n\
                 demo:\n  bind: \"127.0.0.1:{}\"\n{extra}",
                free_port()
            ),
        )
        .unwrap();
        self.admin = format!("http://{admin}");
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.config.with_extension("log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_brownout"))
            .arg("--config")
            .arg(&self.config)
            .env("BROWNOUT_ADMIN_TOKEN", TOKEN)
            .env("RUST_LOG", "brownout=debug,warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// What the process logged, for failure messages.
    fn log(&self) -> String {
        std::fs::read_to_string(self.config.with_extension("log")).unwrap_or_default()
    }

    /// Sends an admin request; the status and the JSON body (`Null` if none).
    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        if_match: Option<&str>,
    ) -> (u16, Value) {
        let client = awc::Client::builder()
            .timeout(Duration::from_secs(5))
            .finish();
        let mut req = client
            .request(method.parse().unwrap(), format!("{}{path}", self.admin))
            .bearer_auth(TOKEN);
        if let Some(tag) = if_match {
            req = req.insert_header(("If-Match", tag));
        }
        let res = match body {
            Some(body) => req.send_json(&body).await,
            None => req.send().await,
        };
        let mut res = res.unwrap_or_else(|e| panic!("{} {path}: {e}\n{}", self.name, self.log()));
        let status = res.status().as_u16();
        let bytes = res.body().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Engages the kill switch here; the answer's body.
    async fn kill_switch_on(&self) -> Value {
        let (status, body) = self
            .send(
                "PUT",
                "/v1/kill-switch",
                Some(json!({"engaged": true})),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// `GET /metrics`.
    async fn metrics(&self) -> String {
        let mut res = awc::Client::new()
            .get(format!("{}/metrics", self.admin))
            .send()
            .await
            .unwrap();
        String::from_utf8_lossy(&res.body().await.unwrap()).into_owned()
    }

    async fn state(&self) -> Value {
        let (status, state) = self.send("GET", "/v1/state", None, None).await;
        assert_eq!(status, 200, "{state}");
        state
    }

    async fn audit(&self) -> Vec<Value> {
        let (_, audit) = self.send("GET", "/v1/audit", None, None).await;
        audit
            .as_array()
            .or_else(|| audit["entries"].as_array())
            .cloned()
            .unwrap_or_else(|| panic!("audit: {audit}"))
    }

    /// Waits (at most `within`) until `check` holds for this instance's state.
    async fn until(
        &self,
        within: Duration,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Duration {
        let start = Instant::now();
        loop {
            if let Ok(state) = self.try_state().await {
                if check(&state) {
                    return start.elapsed();
                }
                assert!(
                    start.elapsed() < within,
                    "{}: not {what} within {within:?}; state: {}\n{}",
                    self.name,
                    state["settings"],
                    self.log()
                );
            } else {
                assert!(
                    start.elapsed() < within,
                    "{}: no admin API\n{}",
                    self.name,
                    self.log()
                );
            }
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn try_state(&self) -> Result<Value, ()> {
        let client = awc::Client::builder()
            .timeout(Duration::from_secs(2))
            .finish();
        let mut res = client
            .get(format!("{}/v1/state", self.admin))
            .bearer_auth(TOKEN)
            .send()
            .await
            .map_err(|_| ())?;
        res.json::<Value>().limit(1 << 20).await.map_err(|_| ())
    }

    /// Waits until the instance answers and has read the fleet's settings. A process that
    /// exits first (a port picked as free was taken by another test before it bound it) is
    /// started again on other ports.
    async fn ready(&mut self) {
        for _ in 0..3 {
            let start = Instant::now();
            loop {
                let exited = self
                    .child
                    .as_mut()
                    .map(|c| matches!(c.try_wait(), Ok(Some(_))));
                if exited == Some(true) {
                    break;
                }
                if let Ok(state) = self.try_state().await {
                    if state["settings"]["connected"] == true {
                        return;
                    }
                }
                let waited = start.elapsed();
                assert!(
                    waited < Duration::from_secs(20),
                    "{}: not connected\n{}",
                    self.name,
                    self.log()
                );
                actix_web::rt::time::sleep(Duration::from_millis(20)).await;
            }
            self.child = None;
            self.configure();
            self.spawn();
        }
        panic!("{} would not start:\n{}", self.name, self.log());
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Redis, and instances a, b and c on it, all connected.
async fn fleet(test: &str) -> (RedisServer, [Instance; 3], PathBuf) {
    let dir = std::env::temp_dir().join(format!("brownout-fleet-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let redis = RedisServer::start();
    let mut instances = ["a", "b", "c"].map(|name| Instance::start(name, redis.port, &dir));
    for i in &mut instances {
        i.ready().await;
    }
    (redis, instances, dir)
}

fn mode(state: &Value, limiter: &str) -> String {
    state["limiters"][limiter]["mode"]
        .as_str()
        .unwrap_or("?")
        .to_owned()
}

#[actix_web::test]
async fn a_kill_switch_on_one_instance_is_in_force_on_the_others_within_a_second() {
    let (_redis, [a, b, c], dir) = fleet("kill").await;
    let body = a.kill_switch_on().await;
    assert_eq!(body["scope"], "fleet", "{body}");
    let version = body["version"].as_u64().unwrap();
    for other in [&b, &c] {
        let took = other
            .until(Duration::from_secs(1), "killed", |s| {
                s["kill_switch"] == true
            })
            .await;
        eprintln!(
            "{}: kill switch in force {took:?} after a's answer",
            other.name
        );
        let state = other.state().await;
        assert_eq!(state["version"], version, "one version for the fleet");
        assert_eq!(state["settings"]["fleet_version"], version);
        assert_eq!(state["settings"]["in_sync"], true);
        // The audit log says which instance made the change.
        let audit = other.audit().await;
        let entry = audit.last().unwrap();
        assert_eq!(entry["action"], "kill_switch", "{entry}");
        assert_eq!(entry["instance"], "a", "{entry}");
        assert_eq!(entry["source"], "fleet", "{entry}");
    }
    let text = c.metrics().await;
    assert!(
        text.contains(&format!("brownout_config_version {version}")),
        "{text}"
    );
    assert!(text.contains("brownout_fleet_settings_in_sync 1"), "{text}");
    assert!(
        text.contains("brownout_fleet_settings_total{result=\"applied\"}"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_web::test]
async fn a_timed_dark_launch_reverts_once_for_the_fleet() {
    let (_redis, [a, b, c], dir) = fleet("ttl").await;
    let was = mode(&a.state().await, "fleet_usage");
    let (status, body) = a
        .send(
            "PUT",
            "/v1/limiters/fleet_usage/mode",
            Some(json!({"mode": "dark", "ttl_seconds": 2})),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let set_at = Instant::now();
    let version = body["version"].as_u64().unwrap();
    for i in [&a, &b, &c] {
        i.until(Duration::from_secs(1), "dark", |s| {
            mode(s, "fleet_usage") == "dark"
        })
        .await;
    }
    // A goes away: the revert still happens, on b or c.
    drop(a);
    for i in [&b, &c] {
        i.until(Duration::from_secs(6), "reverted", |s| {
            mode(s, "fleet_usage") == was
        })
        .await;
    }
    assert!(
        set_at.elapsed() >= Duration::from_millis(1_900),
        "reverted before its ttl"
    );
    // Once: one version after the change, one revert entry, made by one instance.
    actix_web::rt::time::sleep(Duration::from_millis(500)).await;
    let mut makers = Vec::new();
    for i in [&b, &c] {
        let state = i.state().await;
        assert_eq!(
            state["version"],
            version + 1,
            "{}: {}",
            i.name,
            state["settings"]
        );
        let reverts: Vec<Value> = i
            .audit()
            .await
            .into_iter()
            .filter(|e| e["action"] == "revert")
            .collect();
        assert_eq!(reverts.len(), 1, "{}: {reverts:?}", i.name);
        makers.push(reverts[0]["instance"].clone());
    }
    assert_eq!(makers[0], makers[1], "the same revert everywhere");
    assert!(makers[0] == "b" || makers[0] == "c", "{makers:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_web::test]
async fn a_stale_if_match_is_refused_on_another_instance() {
    let (_redis, [a, b, c], dir) = fleet("ifmatch").await;
    let (_, config) = a.send("GET", "/v1/config", None, None).await;
    let seen = config["version"].as_u64().unwrap();
    c.kill_switch_on().await;
    let patch = json!({"limiters": {"fleet_usage": {"capacity": 77}}});
    let (status, body) = b
        .send(
            "PATCH",
            "/v1/config",
            Some(patch.clone()),
            Some(&format!("\"{seen}\"")),
        )
        .await;
    assert_eq!(status, 412, "{body}");
    assert_eq!(body["current_version"], seen + 1, "{body}");
    // Against the fleet's version it goes through, everywhere.
    let (status, body) = b
        .send(
            "PATCH",
            "/v1/config",
            Some(patch),
            Some(&format!("\"{}\"", seen + 1)),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    for i in [&a, &c] {
        i.until(Duration::from_secs(1), "patched", |s| {
            s["limiters"]["fleet_usage"]["capacity"] == 77
        })
        .await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_web::test]
async fn a_restarted_instance_comes_back_with_the_fleets_settings() {
    let (_redis, [a, b, mut c], dir) = fleet("restart").await;
    c.stop();
    let (status, _) = a
        .send(
            "PATCH",
            "/v1/config",
            Some(json!({"kill_switch": true, "limiters": {"fleet_usage": {"capacity": 55}}})),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let version = a.state().await["version"].clone();
    c.spawn();
    c.ready().await;
    let state = c.state().await;
    assert_eq!(state["kill_switch"], true, "{}", state["settings"]);
    assert_eq!(state["limiters"]["fleet_usage"]["capacity"], 55);
    assert_eq!(state["version"], version);
    b.until(Duration::from_secs(1), "in sync", |s| {
        s["version"] == version
    })
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_web::test]
async fn a_change_while_redis_is_down_stays_local_and_the_fleet_converges_when_it_is_back() {
    let (mut redis, [a, b, c], dir) = fleet("outage").await;
    let port = redis.port;
    redis.kill();
    let body = b.kill_switch_on().await;
    assert_eq!(body["scope"], "local", "{body}");
    let state = b.state().await;
    assert_eq!(state["kill_switch"], true);
    assert_eq!(
        state["settings"]["local_changes"], true,
        "{}",
        state["settings"]
    );
    assert_eq!(state["settings"]["in_sync"], false);
    // The others keep their settings.
    actix_web::rt::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.state().await["kill_switch"], false);
    assert_eq!(c.state().await["kill_switch"], false);

    // Redis is back (empty): b's change becomes the fleet's; a and c follow.
    let _redis = RedisServer::on(port);
    for i in [&a, &b, &c] {
        i.until(Duration::from_secs(6), "converged", |s| {
            s["kill_switch"] == true && s["settings"]["in_sync"] == true
        })
        .await;
    }
    let mut versions = Vec::new();
    for i in [&a, &b, &c] {
        let state = i.state().await;
        assert_eq!(
            state["settings"]["local_changes"], false,
            "{}",
            state["settings"]
        );
        versions.push(state["version"].clone());
    }
    assert!(versions.iter().all(|v| *v == versions[0]), "{versions:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[actix_web::test]
async fn an_instance_that_cannot_apply_the_fleets_settings_says_so_and_keeps_its_own() {
    let (redis, [a, b, c], dir) = fleet("refuse").await;
    // d sizes its own memory differently (kept: never part of the fleet's settings) and has
    // a quota the others do not (the number of quotas is fixed at start): it cannot apply
    // what they write.
    let mut d = Instance::with(
        "d",
        redis.port,
        &dir,
        "limiters:\n  request_rate:\n    max_keys: 5000\n    quotas:\n      - name: daily\n        algorithm: fixed_window\n        limit: 1000\n        window: 1d\n",
    );
    d.ready().await;
    let body = a.kill_switch_on().await;
    let version = body["version"].as_u64().unwrap();
    for i in [&b, &c] {
        i.until(Duration::from_secs(1), "killed", |s| {
            s["kill_switch"] == true
        })
        .await;
    }
    d.until(Duration::from_secs(3), "refusing", |s| {
        s["settings"]["refused"]["version"] == version
    })
    .await;
    let state = d.state().await;
    assert_eq!(state["kill_switch"], false, "d keeps its settings");
    assert_eq!(state["settings"]["in_sync"], false);
    let error = state["settings"]["refused"]["error"].as_str().unwrap();
    assert!(error.contains("limiters.request_rate.quotas"), "{error}");
    let text = d.metrics().await;
    assert!(
        text.contains("brownout_fleet_settings_total{result=\"rejected\"} 1"),
        "{text}"
    );
    assert!(text.contains("brownout_fleet_settings_in_sync 0"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(unix)]
#[actix_web::test]
async fn a_reload_on_one_instance_reaches_the_fleet() {
    let (_redis, [a, b, c], dir) = fleet("reload").await;
    // a's file gets a new fleet_usage capacity; SIGHUP reloads it, and the fleet follows.
    let mut text = std::fs::read_to_string(&a.config).unwrap();
    text.push_str("limiters:\n  fleet_usage:\n    capacity: 321\n");
    std::fs::write(&a.config, text).unwrap();
    let pid = a.child.as_ref().unwrap().id().to_string();
    let sent = Command::new("kill").args(["-HUP", &pid]).status().unwrap();
    assert!(sent.success());
    for i in [&a, &b, &c] {
        i.until(Duration::from_secs(3), "reloaded", |s| {
            s["limiters"]["fleet_usage"]["capacity"] == 321
        })
        .await;
    }
    let audit = c.audit().await;
    let entry = audit.last().unwrap();
    assert_eq!(entry["action"], "reload", "{entry}");
    assert_eq!(entry["instance"], "a", "{entry}");
    std::fs::remove_dir_all(&dir).unwrap();
}
