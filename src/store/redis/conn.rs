//! One connection to Redis, standalone (a `ConnectionManager`: one multiplexed connection that
//! reconnects by itself) or Cluster (the async cluster client: commands routed by key slot).
//! Both are cheap to clone; every call clones one.

use crate::schema::{ConfigError, StoreConfig};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::time::Duration;

/// How a reconnecting connection waits for the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What to connect to.
pub(super) enum Target {
    Single(redis::Client),
    Cluster(Box<ClusterClient>),
}

impl Target {
    /// The target of `config` (`url` or `nodes`), with every call's response timeout set to
    /// `store.timeout` and at most one retry.
    pub(super) fn new(config: &StoreConfig) -> Result<Self, ConfigError> {
        let timeout = config.timeout.get();
        if !config.nodes.is_empty() {
            let client = ClusterClient::builder(config.nodes.clone())
                .retries(1)
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(timeout)
                .build()
                .map_err(|e| ConfigError::invalid("store.nodes", format!("{e}")))?;
            return Ok(Target::Cluster(Box::new(client)));
        }
        let url = config.url.as_deref().ok_or_else(|| {
            ConfigError::invalid("store.url", "is required when store.kind is redis")
        })?;
        let client = redis::Client::open(url)
            .map_err(|e| ConfigError::invalid("store.url", format!("is not a Redis URL: {e}")))?;
        Ok(Target::Single(client))
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }

    /// Connects, with `timeout` as every call's response timeout.
    pub(super) async fn connect(&self, timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            Target::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(200));
                let manager = ConnectionManager::new_with_config(client.clone(), config).await?;
                Ok(Conn::Single(manager))
            }
            Target::Cluster(client) => Ok(Conn::Cluster(client.get_async_connection().await?)),
        }
    }
}

/// A connection.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
