//! The connections a [`LockClient`](crate::LockClient) talks through: one for lock
//! scripts, one that carries nothing but wake-up subscriptions.
//!
//! Both are built with explicit limits (the driver's defaults would let a request
//! hang or retry for minutes, far longer than any lease); [`cluster_client_builder`]
//! offers the same limits to connections of the application's own.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{
    Client, Cmd, IntoConnectionInfo, Pipeline, ProtocolVersion, PushInfo, RedisFuture, Value,
};

/// Where a subscription connection delivers its pushes.
pub(crate) type Pushes = tokio::sync::mpsc::UnboundedSender<PushInfo>;

use crate::Error;

/// The longest a single request may wait for its reply.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a request may take in all, retries and redirections included.
pub(crate) const OVERALL_TIMEOUT: Duration = Duration::from_secs(4);
/// The longest a (re)connection attempt may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// Retries after a timeout, a lost connection, TRYAGAIN or CLUSTERDOWN.
const RETRIES: u32 = 3;
const MIN_RETRY_WAIT_MS: u64 = 10;
const MAX_RETRY_WAIT_MS: u64 = 250;

/// A redis-rs cluster client builder with the request limits of every
/// [`LockClient`](crate::LockClient): 1 s to connect, 2 s for a reply, 4 s in all
/// with up to 3 retries 10-250 ms apart. Use it for connections of your own that
/// should give up as soon as the lock's do, e.g. to read the data a lock protects.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> redis_rwlock::redis::RedisResult<()> {
/// use redis_rwlock::{cluster_client_builder, redis};
///
/// let mut conn = cluster_client_builder(["redis://127.0.0.1:7000"])
///     .build()?
///     .get_async_connection()
///     .await?;
/// let cached: Option<String> = redis::cmd("GET")
///     .arg("cache:{inventory}")
///     .query_async(&mut conn)
///     .await?;
/// # Ok(()) }
/// ```
pub fn cluster_client_builder<I, S>(nodes: I) -> ClusterClientBuilder
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let nodes: Vec<String> = nodes.into_iter().map(|n| n.as_ref().to_owned()).collect();
    ClusterClientBuilder::new(nodes)
        .connection_timeout(CONNECTION_TIMEOUT)
        .response_timeout(RESPONSE_TIMEOUT)
        .overall_response_timeout(Some(OVERALL_TIMEOUT))
        .retries(RETRIES)
        .min_retry_wait(MIN_RETRY_WAIT_MS)
        .max_retry_wait(MAX_RETRY_WAIT_MS)
}

/// A connection to a cluster or to one server; cheap to clone (clones share the
/// underlying multiplexed connections).
#[derive(Clone)]
pub(crate) enum Connection {
    Cluster(ClusterConnection),
    Standalone(ConnectionManager),
}

impl Connection {
    /// Connects to a Redis Cluster through any of its nodes.
    pub(crate) async fn cluster(nodes: &[String], push: Option<Pushes>) -> Result<Self, Error> {
        if nodes.is_empty() {
            return Err(Error::InvalidOptions("no cluster node URL given".into()));
        }
        let mut builder = cluster_client_builder(nodes);
        if let Some(push) = push {
            builder = builder
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(push);
        }
        let conn = builder
            .build()?
            .get_async_connection()
            .await
            .map_err(|err| not_a_cluster(err, nodes))?;
        Ok(Connection::Cluster(conn))
    }

    /// Connects to one Redis server (not a cluster node).
    pub(crate) async fn standalone(url: &str, push: Option<Pushes>) -> Result<Self, Error> {
        let mut info = url.into_connection_info()?;
        let mut config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(RETRIES as usize)
            .set_max_delay(Duration::from_millis(MAX_RETRY_WAIT_MS));
        if let Some(push) = push {
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            info = info.set_redis_settings(settings);
            config = config.set_push_sender(push).set_automatic_resubscription();
        }
        let client = Client::open(info)?;
        let mut conn = ConnectionManager::new_with_config(client, config).await?;
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut conn)
            .await?;
        if info.contains("cluster_enabled:1") {
            return Err(Error::InvalidOptions(format!(
                "{url} is a Redis Cluster node: use LockClient::cluster"
            )));
        }
        Ok(Connection::Standalone(conn))
    }

    /// The command a script publishes wake-ups with: sharded on a cluster.
    pub(crate) fn publish_command(&self) -> &'static str {
        match self {
            Connection::Cluster(_) => "SPUBLISH",
            Connection::Standalone(_) => "PUBLISH",
        }
    }

    /// Subscribes this (subscription-only) connection to `channel`.
    pub(crate) async fn subscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Connection::Cluster(conn) => conn.ssubscribe(channel).await,
            Connection::Standalone(conn) => conn.subscribe(channel).await,
        }
    }

    /// Ends this connection's subscription to `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Connection::Cluster(conn) => conn.sunsubscribe(channel).await,
            Connection::Standalone(conn) => conn.unsubscribe(channel).await,
        }
    }
}

/// A standalone server refuses the cluster client's first request; say so plainly.
fn not_a_cluster(err: redis::RedisError, nodes: &[String]) -> Error {
    if err.to_string().contains("cluster support disabled") {
        Error::InvalidOptions(format!(
            "{} is not a Redis Cluster node: use LockClient::standalone",
            nodes.join(", ")
        ))
    } else {
        Error::Redis(err)
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Cluster(conn) => conn.req_packed_command(cmd),
            Connection::Standalone(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            Connection::Standalone(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Cluster(conn) => conn.get_db(),
            Connection::Standalone(conn) => conn.get_db(),
        }
    }
}
