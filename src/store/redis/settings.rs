//! The fleet's settings document in Redis: one hash (`<prefix>{settings}`: `version`, `doc`)
//! written only by compare-and-set on the version, and a pub/sub channel
//! (`<prefix>settings`) that announces each new version. Admin calls, not the request path:
//! they wait up to [`TIMEOUT`].

use super::RedisStore;
use std::time::Duration;

/// How long a settings call may take.
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// Sets the document if the stored version is `ARGV[1]` (0: none yet) and announces it;
/// answers -1 when written, else the stored version.
const CAS: &str = r"
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return v end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'doc', ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[2])
return -1
";

/// The answer to a compare-and-set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cas {
    /// Written and announced.
    Written,
    /// Someone else's version is stored (this one).
    Moved(u64),
}

impl RedisStore {
    /// The settings hash's key.
    pub fn settings_key(&self) -> String {
        format!("{}{{settings}}", self.keys().prefix())
    }

    /// The channel new versions are announced on.
    pub fn settings_channel(&self) -> String {
        format!("{}settings", self.keys().prefix())
    }

    fn settings_conn(&self) -> redis::RedisResult<super::Conn> {
        match self.conn.load_full() {
            Some(conn) => Ok((*conn).clone()),
            None => Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "not connected to Redis yet",
            ))),
        }
    }

    /// The stored version and document (`None`: the fleet has none yet).
    pub async fn settings_read(&self) -> redis::RedisResult<Option<(u64, String)>> {
        let mut conn = self.settings_conn()?;
        let key = self.settings_key();
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&key).arg("version").arg("doc");
        let read = cmd.query_async::<(Option<u64>, Option<String>)>(&mut conn);
        match tokio::time::timeout(TIMEOUT, read).await {
            Ok(Ok((Some(version), Some(doc)))) => Ok(Some((version, doc))),
            Ok(Ok(_)) => Ok(None),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(timed_out()),
        }
    }

    /// Stores `doc` as `version` if the stored version is still `expected`, and announces it.
    pub async fn settings_write(
        &self,
        expected: u64,
        version: u64,
        doc: &str,
    ) -> redis::RedisResult<Cas> {
        let mut conn = self.settings_conn()?;
        let script = redis::Script::new(CAS);
        let mut call = script.key(self.settings_key());
        call.arg(expected)
            .arg(version)
            .arg(doc)
            .arg(self.settings_channel());
        match tokio::time::timeout(TIMEOUT, call.invoke_async::<i64>(&mut conn)).await {
            Ok(Ok(-1)) => Ok(Cas::Written),
            Ok(Ok(v)) => Ok(Cas::Moved(u64::try_from(v).unwrap_or(0))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(timed_out()),
        }
    }

    /// A connection subscribed to the settings channel; `attempt` picks the node to try (in
    /// Cluster, every node relays what is published on any of them).
    pub async fn settings_subscribe(
        &self,
        attempt: usize,
    ) -> redis::RedisResult<redis::aio::PubSub> {
        let url = &self.pubsub_urls[attempt % self.pubsub_urls.len().max(1)];
        let client = redis::Client::open(url.as_str())?;
        let subscribe = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(self.settings_channel()).await?;
            Ok(pubsub)
        };
        tokio::time::timeout(TIMEOUT, subscribe)
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "timed out"))
}
