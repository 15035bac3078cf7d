//! The connections a [`LockClient`](crate::LockClient) talks through: one for lock
//! scripts, one that carries nothing but wake-up subscriptions.
//!
//! Both are built with explicit limits (the driver's defaults would let a request
//! hang or retry for minutes, far longer than any lease); [`cluster_client_builder`]
//! offers the same limits to connections of the application's own. The lock
//! connection checks the server with one `INFO server` when it is made (see
//! [`crate::server`]).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{
    Client, Cmd, IntoConnectionInfo, Pipeline, ProtocolVersion, PushInfo, RedisFuture, RedisResult,
    Value,
};

/// Where a subscription connection delivers its pushes.
pub(crate) type Pushes = tokio::sync::mpsc::UnboundedSender<PushInfo>;

use crate::Error;
use crate::server::ServerInfo;

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
    /// Connects to a Redis Cluster through any of its nodes. With `check`, one node's
    /// `INFO server` must show a version the lock can use.
    pub(crate) async fn cluster(
        nodes: &[String],
        push: Option<Pushes>,
        check: bool,
    ) -> Result<Self, Error> {
        if nodes.is_empty() {
            return Err(Error::InvalidOptions("no cluster node URL given".into()));
        }
        let mut builder = cluster_client_builder(nodes);
        if let Some(push) = push {
            builder = builder
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(push);
        }
        let mut conn = builder
            .build()?
            .get_async_connection()
            .await
            .map_err(|err| not_a_cluster(err, nodes))?;
        if check {
            // One node stands for the cluster: its nodes run one version (a rolling
            // upgrade only moves it forward).
            let reply = conn
                .route_command(
                    info_server(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                )
                .await;
            let what = format!("the cluster at {}", address(&nodes[0]));
            if let Some(info) = server_info(reply, &what)? {
                checked(&info, &what, true)?;
            }
        }
        Ok(Connection::Cluster(conn))
    }

    /// Connects to one Redis server (not a cluster node). With `check`, its
    /// `INFO server` must show a version the lock can use and no cluster mode.
    pub(crate) async fn standalone(
        url: &str,
        push: Option<Pushes>,
        check: bool,
    ) -> Result<Self, Error> {
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
        let what = format!("the server at {}", info.addr());
        let client = Client::open(info)?;
        let mut conn = ConnectionManager::new_with_config(client, config).await?;
        if check {
            let reply = info_server().query_async(&mut conn).await;
            let Some(info) = server_info(reply, &what)? else {
                return Ok(Connection::Standalone(conn));
            };
            checked(&info, &what, false)?;
            let mode = match info.mode {
                Some(mode) => mode,
                // A server whose INFO server names no mode: ask INFO cluster.
                None => {
                    let cluster: String = redis::cmd("INFO")
                        .arg("cluster")
                        .query_async(&mut conn)
                        .await?;
                    let enabled = cluster.lines().any(|l| l.trim() == "cluster_enabled:1");
                    if enabled { "cluster" } else { "standalone" }.to_owned()
                }
            };
            match mode.as_str() {
                "cluster" => {
                    return Err(Error::InvalidOptions(format!(
                        "{what} is a cluster node: use LockClient::cluster"
                    )));
                }
                "sentinel" => {
                    return Err(Error::InvalidOptions(format!(
                        "{what} is a sentinel: connect to the master it names"
                    )));
                }
                _ => {}
            }
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
        let addresses: Vec<String> = nodes.iter().map(|url| address(url)).collect();
        Error::InvalidOptions(format!(
            "{} is not a Redis Cluster node: use LockClient::standalone",
            addresses.join(", ")
        ))
    } else {
        Error::Redis(err)
    }
}

/// `host:port` of a URL, for messages (never the URL: it may hold a password).
fn address(url: &str) -> String {
    url.into_connection_info()
        .map(|info| info.addr().to_string())
        .unwrap_or_else(|_| "an unreadable URL".to_owned())
}

fn info_server() -> Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    cmd
}

/// Reads an `INFO server` reply. An error reply (INFO denied by an ACL, or renamed
/// away) is no reason to refuse the connection: the check is skipped with a warning.
fn server_info(reply: RedisResult<Value>, what: &str) -> Result<Option<ServerInfo>, Error> {
    match reply {
        Ok(value) => {
            let text: String = redis::from_redis_value(value).map_err(redis::RedisError::from)?;
            Ok(Some(ServerInfo::parse(&text)))
        }
        Err(err) if err.code().is_some() => {
            tracing::warn!(
                error = %err,
                "INFO server failed on {what}: its version is not checked (the lock needs redis 7.0 or newer)"
            );
            Ok(None)
        }
        Err(err) => Err(Error::Redis(err)),
    }
}

/// [`ServerInfo::check_version`], warning when the reply names no readable version.
fn checked(info: &ServerInfo, what: &str, cluster: bool) -> Result<(), Error> {
    if info.check_version(what, cluster)? {
        tracing::debug!(server = %info.describe(), "connected to {what}");
    } else {
        tracing::warn!(
            server = %info.describe(),
            "{what} reports no readable redis_version: its version is not checked (the lock needs redis 7.0 or newer)"
        );
    }
    Ok(())
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
