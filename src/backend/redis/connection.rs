//! The connections a [`LockClient`](crate::LockClient) talks through: one for lock
//! scripts, one that carries nothing but wake-up subscriptions.
//!
//! Both are built with explicit limits (the driver's defaults would let a request
//! hang or retry for minutes, far longer than any lease); [`cluster_client_builder`]
//! offers the same limits to connections of the application's own. The lock
//! connection checks the server with one `INFO server` when it is made (see
//! [`super::server`]).

use std::time::Duration;

use redis::aio::{AsyncPushSender, ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{
    Client, Cmd, IntoConnectionInfo, Pipeline, ProtocolVersion, PushInfo, PushKind, RedisFuture,
    RedisResult, Value,
};

use super::server::ServerInfo;
use crate::Error;
use crate::backend::{Limits, Node, Push, PushSender, Scan};

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
    let limits = Limits::default();
    ClusterClientBuilder::new(nodes)
        .connection_timeout(limits.connection)
        .response_timeout(limits.response)
        .overall_response_timeout(Some(limits.overall))
        .retries(RETRIES)
        .min_retry_wait(MIN_RETRY_WAIT_MS)
        .max_retry_wait(MAX_RETRY_WAIT_MS)
}

/// A connection to a cluster or to one server; cheap to clone (clones share the
/// underlying multiplexed connections).
#[derive(Clone)]
pub(crate) enum Connection {
    Cluster(ClusterConnection),
    Standalone(Standalone),
}

/// A connection to one server, with the overall limit the driver's connection
/// manager does not apply itself.
#[derive(Clone)]
pub(crate) struct Standalone {
    conn: ConnectionManager,
    overall: Duration,
}

/// The two connections of a client: one for lock scripts, one for nothing but
/// wake-up subscriptions.
pub(crate) struct Connections {
    pub(crate) lock: Connection,
    pub(crate) subscriptions: Connection,
}

/// Makes sure the driver's rustls finds a crypto provider: it panics at the first
/// `rediss://` connection otherwise. Installs ring's, unless the application
/// installed one of its own first (that one stays).
#[cfg(feature = "tls-rustls")]
pub(crate) fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Err: another thread installed one meanwhile, which is as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// The marker `Debug` shows for a cluster client builder that reads from replicas.
const READS_FROM_REPLICAS: &str = "read_routing_factory: \"set\"";

impl Connection {
    /// Connects to a Redis Cluster with the application's (or our) `builder`, and
    /// checks one node's `INFO server`. Both connections come from one client built
    /// with RESP3 (pushes need it); the subscription one alone gets `push`. `first`
    /// names a node for messages when the caller knows one.
    pub(crate) async fn cluster(
        builder: ClusterClientBuilder,
        limits: Limits,
        push: PushSender,
        first: Option<&str>,
    ) -> Result<Connections, Error> {
        // The builder's fields are private; its Debug output is the only view of
        // whether it routes reads to replicas.
        if format!("{builder:?}").contains(READS_FROM_REPLICAS) {
            return Err(Error::InvalidOptions(
                "the cluster client reads from replicas (read_routing_strategy or \
                 read_from_replicas): lock state must be read from masters, since replication \
                 is asynchronous; give the lock a builder without it"
                    .into(),
            ));
        }
        let client = builder
            .connection_timeout(limits.connection)
            .response_timeout(limits.response)
            .overall_response_timeout(Some(limits.overall))
            .use_protocol(ProtocolVersion::RESP3)
            .build()?;
        let what = match first {
            Some(url) => format!("the cluster at {}", address(url)),
            None => "the cluster".to_owned(),
        };
        let mut conn = client
            .get_async_connection()
            .await
            .map_err(|err| not_a_cluster(err, &what))?;
        // One node stands for the cluster: its nodes run one version (a rolling
        // upgrade only moves it forward).
        // An error reply (NOPERM) comes back as a value from a routed command.
        let reply = conn
            .route_command(
                info_server(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await
            .and_then(Value::extract_error);
        if let Some(info) = server_info(reply, &what)? {
            checked(&info, &what, true)?;
        }
        let config = ClusterConfig::new()
            .set_connection_timeout(limits.connection)
            .set_response_timeout(limits.response)
            .set_push_sender(push_sender(push));
        let subscriptions = client.get_async_connection_with_config(config).await?;
        Ok(Connections {
            lock: Connection::Cluster(conn),
            subscriptions: Connection::Cluster(subscriptions),
        })
    }

    /// Connects to one Redis server (not a cluster node) with the application's (or
    /// our) `client`, and checks its `INFO server`. The lock connection speaks the
    /// client's protocol; the subscription connection is made from the same
    /// connection info (address, TLS, credentials, database) with RESP3 and `push`.
    pub(crate) async fn standalone(
        client: Client,
        limits: Limits,
        push: PushSender,
    ) -> Result<Connections, Error> {
        let info = client.get_connection_info().clone();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(limits.connection))
            .set_response_timeout(Some(limits.response))
            .set_number_of_retries(RETRIES as usize)
            .set_max_delay(Duration::from_millis(MAX_RETRY_WAIT_MS));
        let what = format!("the server at {}", info.addr());
        let mut conn = ConnectionManager::new_with_config(client, config.clone()).await?;
        let reply = info_server().query_async(&mut conn).await;
        if let Some(server) = server_info(reply, &what)? {
            checked(&server, &what, false)?;
            let mode = match server.mode {
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
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let subscriber = Client::open(info.set_redis_settings(settings))?;
        let config = config
            .set_push_sender(push_sender(push))
            .set_automatic_resubscription();
        let subscriptions = ConnectionManager::new_with_config(subscriber, config).await?;
        let overall = limits.overall;
        Ok(Connections {
            lock: Connection::Standalone(Standalone { conn, overall }),
            subscriptions: Connection::Standalone(Standalone {
                conn: subscriptions,
                overall,
            }),
        })
    }

    /// The command a script publishes wake-ups with: sharded on a cluster.
    pub(crate) fn publish_command(&self) -> &'static str {
        match self {
            Connection::Cluster(_) => "SPUBLISH",
            Connection::Standalone(_) => "PUBLISH",
        }
    }

    /// Sends `cmd` to the master that serves `key` (the one server, when
    /// standalone), however the driver would route it by itself: it sends a keyless
    /// command such as `FUNCTION LOAD` to every master and waits for all of them.
    pub(crate) async fn on_master_of(&self, cmd: Cmd, key: &str) -> RedisResult<Value> {
        match self {
            Connection::Cluster(conn) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                // An error reply comes back as a value here, unlike from a query.
                conn.clone()
                    .route_command(cmd, routing)
                    .await
                    .and_then(Value::extract_error)
            }
            Connection::Standalone(_) => cmd.query_async(&mut self.clone()).await,
        }
    }

    /// Subscribes this (subscription-only) connection to `channel`: sharded on a
    /// cluster.
    pub(crate) async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        match self.clone() {
            Connection::Cluster(mut conn) => conn.ssubscribe(channel).await?,
            Connection::Standalone(mut s) => s.conn.subscribe(channel).await?,
        }
        Ok(())
    }

    /// Ends this connection's subscription to `channel`.
    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        match self.clone() {
            Connection::Cluster(mut conn) => conn.sunsubscribe(channel).await?,
            Connection::Standalone(mut s) => s.conn.unsubscribe(channel).await?,
        }
        Ok(())
    }
}

/// Hands the pushes a subscription connection receives to `push` as the lock side
/// reads them: messages, and dropped subscriptions (Redis drops sharded ones on
/// failover and slot moves; an unsubscribe of ours arrives here too).
fn push_sender(push: PushSender) -> impl AsyncPushSender + Clone {
    move |info: PushInfo| {
        let text = |value: &Value| match value {
            Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        let read = match info.kind {
            PushKind::Message | PushKind::SMessage => match info.data.as_slice() {
                [channel, payload, ..] => text(channel)
                    .zip(text(payload))
                    .map(|(channel, payload)| Push::Message { channel, payload }),
                _ => None,
            },
            PushKind::SUnsubscribe | PushKind::Unsubscribe => info
                .data
                .first()
                .and_then(text)
                .map(|channel| Push::Dropped(Some(channel))),
            PushKind::Disconnection => Some(Push::Dropped(None)),
            _ => None,
        };
        match read {
            Some(read) => push.send(read),
            None => Ok(()),
        }
    }
}

/// The servers the listing scans: every master of a cluster (in address order, as
/// the driver knows them, with their `DBSIZE`), or the one server.
pub(crate) async fn masters(conn: &Connection) -> Result<Vec<Node>, Error> {
    let Connection::Cluster(cluster) = conn else {
        return Ok(vec![Node::single()]);
    };
    // Sent to every master at once; the driver answers with a map from each
    // master's address to its reply (errors included, as values).
    let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    let reply = cluster
        .clone()
        .route_command(redis::cmd("DBSIZE"), routing)
        .await
        .and_then(Value::extract_error)?;
    let Value::Map(replies) = reply else {
        return Err(unexpected("DBSIZE to every master", &reply));
    };
    let mut nodes = Vec::with_capacity(replies.len());
    for (address, keys) in replies {
        let address: String = redis::from_redis_value(address).map_err(redis::RedisError::from)?;
        let keys: u64 = redis::from_redis_value(keys).map_err(redis::RedisError::from)?;
        let route = address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)));
        if route.is_none() {
            return Err(unexpected(
                "a master's address",
                &Value::SimpleString(address),
            ));
        }
        nodes.push(Node {
            address,
            route,
            keys: Some(keys),
        });
    }
    nodes.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(nodes)
}

/// One `SCAN cursor MATCH glob COUNT count TYPE hash` on the scan's node: the next
/// cursor (0: done) and the keys found (names that are not UTF-8 are no lock's).
pub(crate) async fn scan_node(
    conn: &Connection,
    scan: &Scan<'_>,
) -> Result<(u64, Vec<String>), Error> {
    let Scan {
        node,
        cursor,
        glob,
        count,
    } = *scan;
    let mut cmd: Cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(glob)
        .arg("COUNT")
        .arg(count)
        .arg("TYPE")
        .arg("hash");
    let reply = match (conn, &node.route) {
        (Connection::Cluster(cluster), Some((host, port))) => {
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port: *port,
            });
            cluster
                .clone()
                .route_command(cmd, routing)
                .await
                .and_then(Value::extract_error)?
        }
        _ => cmd.query_async(&mut conn.clone()).await?,
    };
    let (next, keys): (u64, Vec<Vec<u8>>) =
        redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
    let keys = keys
        .into_iter()
        .filter_map(|key| String::from_utf8(key).ok())
        .collect();
    Ok((next, keys))
}

/// A reply of a shape the driver or server should never give.
fn unexpected(what: &str, reply: &Value) -> Error {
    Error::from(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("{what}: {reply:?}"),
    )))
}

/// A standalone server refuses the cluster client's first request; say so plainly.
fn not_a_cluster(err: redis::RedisError, what: &str) -> Error {
    if err.to_string().contains("cluster support disabled") {
        Error::InvalidOptions(format!(
            "{what} is not a Redis Cluster: its nodes run without cluster mode; use \
             LockClient::standalone"
        ))
    } else {
        Error::from(err)
    }
}

/// Refuses a URL the driver cannot connect with (another scheme, no host, `rediss://`
/// without TLS support...) before anything is sent: a configuration error, named by
/// `what` (never the URL itself: it may hold a password).
pub(crate) fn check_url(url: &str, what: &str) -> Result<(), Error> {
    url.into_connection_info().map(drop).map_err(|err| {
        // The driver's text is "<reason> - <kind>[: <detail>]"; the kind adds nothing.
        let reason = err
            .to_string()
            .replacen(&format!(" - {:?}", err.kind()), "", 1);
        Error::InvalidOptions(format!(
            "{what} is not a usable Redis URL (redis://, rediss://, valkey://, valkeys:// \
             or unix://): {reason}{}",
            url_problem(url)
        ))
    })
}

/// What is wrong with a URL the driver refused, where a look at its shape tells
/// (the driver often says only that it did not parse); empty otherwise. Names the
/// scheme at most, never the rest (it may hold a password).
fn url_problem(url: &str) -> String {
    const SCHEMES: [&str; 5] = ["redis", "rediss", "valkey", "valkeys", "unix"];
    match url.split_once("://") {
        None => " (no scheme: it should start with redis://)".to_owned(),
        Some((scheme, _)) if !SCHEMES.contains(&scheme) => {
            let shown: String = scheme.chars().take(16).collect();
            format!(" (scheme {shown:?} is not one of them)")
        }
        Some((_, "")) => " (nothing after the scheme: no host)".to_owned(),
        Some(_) => String::new(),
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
        Err(err) => Err(Error::from(err)),
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
            Connection::Standalone(s) => {
                let overall = s.overall;
                let reply = s.conn.req_packed_command(cmd);
                Box::pin(async move { within(overall, reply).await })
            }
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
            Connection::Standalone(s) => {
                let overall = s.overall;
                let replies = s.conn.req_packed_commands(pipeline, offset, count);
                Box::pin(async move { within(overall, replies).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Cluster(conn) => conn.get_db(),
            Connection::Standalone(s) => s.conn.get_db(),
        }
    }
}

/// `request`, or a timeout error once `overall` has passed.
async fn within<T>(
    overall: Duration,
    request: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(overall, request).await {
        Ok(reply) => reply,
        Err(elapsed) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            elapsed,
        ))),
    }
}
