//! redis-server processes of the tests' own on loopback ports: standalone, or three primaries
//! made into a Cluster.
#![allow(dead_code)] // each test file uses its share

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of its own on a loopback port, stopped when dropped.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RedisServer {
    /// Starts one on a free port (another, if a test took the one picked before it bound it).
    pub fn start() -> Self {
        (0..3)
            .find_map(|_| Self::try_with(free_port(), &[]))
            .expect("redis-server did not start")
    }

    /// Starts one on `port` (a restart uses the same one) and waits until it answers PING.
    pub fn on(port: u16) -> Self {
        Self::try_with(port, &[]).expect("redis-server did not start")
    }

    /// Starts one on a free port that persists every write in an append-only file in `dir`,
    /// fsynced before it answers (`appendfsync always`): killed with SIGKILL and started again
    /// with [`persistent_on`](Self::persistent_on) on its port and `dir`, it has every write
    /// it acknowledged.
    pub fn persistent(dir: &Path) -> Self {
        (0..3)
            .find_map(|_| Self::try_with(free_port(), &Self::aof(dir)))
            .expect("redis-server did not start")
    }

    /// Starts one on `port` with its append-only file in `dir` (a restart after a crash: it
    /// loads the file first).
    pub fn persistent_on(port: u16, dir: &Path) -> Self {
        Self::try_with(port, &Self::aof(dir)).expect("redis-server did not restart")
    }

    fn aof(dir: &Path) -> [&str; 6] {
        let dir = dir.to_str().expect("a UTF-8 temp dir");
        [
            "--dir",
            dir,
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ]
    }

    /// Starts one on `port` with extra arguments (e.g. Cluster mode, or persistence: they
    /// override the defaults) and waits until it answers; `None` if it exited without
    /// answering (the port was taken).
    fn try_with(port: u16, extra: &[&str]) -> Option<Self> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (.ci/run installs it)");
        let mut server = Self {
            child: Some(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.answers() {
            let exited = server
                .child
                .as_mut()
                .map(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited == Some(true) || Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // What answered may be another test's server on a port this one failed to bind: this
        // one exits at once then.
        std::thread::sleep(Duration::from_millis(50));
        let exited = server
            .child
            .as_mut()
            .map(|c| matches!(c.try_wait(), Ok(Some(_))));
        (exited != Some(true)).then_some(server)
    }

    fn answers(&self) -> bool {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A directory of a test's own under the system's temp dir, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new, empty one named after `what`.
    pub fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "brownout-{what}-{}-{}",
            std::process::id(),
            free_port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Three primaries on loopback ports made into a Cluster (no replicas), in a directory of its
/// own (their nodes.conf files, so that a restarted node rejoins with its slots).
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
    /// Each node's cluster bus port (kept for a restart).
    bus: Vec<u16>,
    dir: std::path::PathBuf,
}

impl Cluster {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "brownout-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // A free port may be taken before the node binds it: another pair of ports then.
        let (nodes, bus): (Vec<RedisServer>, Vec<u16>) = (0..3)
            .map(|_| {
                (0..3)
                    .find_map(|_| {
                        let bus = free_port();
                        Self::try_node(&dir, free_port(), bus).map(|n| (n, bus))
                    })
                    .expect("a cluster node did not start")
            })
            .unzip();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli must be installed (Debian's redis-tools, with redis-server)");
        assert!(created.success(), "redis-cli --cluster create failed");
        let cluster = Self { nodes, bus, dir };
        cluster.wait_ok();
        cluster
    }

    /// A Cluster node on `port`, its bus on `bus`: named, since the default (port + 10000) is
    /// past 65535 for a third of the ephemeral ports, and redis-server then refuses to start.
    fn try_node(dir: &std::path::Path, port: u16, bus: u16) -> Option<RedisServer> {
        let conf = dir.join(format!("nodes-{port}.conf"));
        RedisServer::try_with(
            port,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus.to_string(),
                "--cluster-config-file",
                conf.to_str().unwrap(),
                "--dir",
                dir.to_str().unwrap(),
            ],
        )
    }

    /// The seed nodes, as `store.nodes` takes them.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Waits until every node says the cluster is ok.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = self.nodes.iter().all(|n| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut n.connection())
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not become ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Keys held by each node.
    pub fn keys_per_node(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| redis::cmd("DBSIZE").query(&mut n.connection()).unwrap())
            .collect()
    }

    /// Stops node `i`.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again on its port, with its nodes.conf: it rejoins with its slots.
    pub fn restart(&mut self, i: usize) {
        let port = self.nodes[i].port;
        self.nodes[i] =
            Self::try_node(&self.dir, port, self.bus[i]).expect("the cluster node did not restart");
        self.wait_ok();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
