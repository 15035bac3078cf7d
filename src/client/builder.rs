//! [`LockClientBuilder`]: a [`LockClient`] from URLs or from the application's own
//! redis-rs configuration, with its request limits.

use std::fmt;
use std::time::Duration;

use crate::backend::redis::connection::{check_url, cluster_client_builder};
use crate::backend::{Connected, Limits};
use crate::client::LockClient;
use crate::{Error, Operation};
use redis::Client;
use redis::cluster::ClusterClientBuilder;

/// Configures and connects a [`LockClient`]: where the servers are (URLs, or a
/// redis-rs client configured by the application with its TLS, credentials and
/// protocol settings) and how long a request may take.
///
/// Made by [`LockClient::builder`]; [`LockClient::cluster`] and
/// [`LockClient::standalone`] are shorthands for it.
///
/// # What the lock needs from a client of yours
///
/// A lock client holds two connections: one for lock scripts and one that carries
/// nothing but wake-up subscriptions, which needs RESP3 (Redis 6+) and a push
/// sender of the lock's own. redis-rs cannot change a built client's protocol, so
/// the lock takes your configuration before it is built:
///
/// * a cluster as a [`ClusterClientBuilder`](https://docs.rs/redis/1/redis/cluster/struct.ClusterClientBuilder.html) ([`cluster_client`](Self::cluster_client)):
///   the lock sets the three limits below and RESP3 on it, builds it once and opens
///   both connections from that client (the subscription one with the lock's push
///   sender). Everything else you set stays: TLS (`ClusterClientBuilder::certs`,
///   `rediss://`), username and password, retries, DNS, TCP settings. A builder
///   that reads from replicas (`read_routing_strategy`, `read_from_replicas`) is
///   refused: replication is asynchronous, so lock state is read from masters only.
/// * one server as a [`redis::Client`](https://docs.rs/redis/1/redis/struct.Client.html) ([`client`](Self::client)): the lock
///   connection uses it as it is; the subscription connection is opened from the
///   same connection info (address, TLS certificates of `Client::build_with_tls`,
///   credentials, database) with RESP3.
///
/// The servers must let the lock's user run the commands the lock sends (see the
/// README's least-privilege `ACL SETUSER` rule); a refused command comes back as
/// [`Error::Redis`] naming it. The one fallback: when `FCALL` or `FUNCTION LOAD` is
/// refused, the client logs it once and sends its scripts as `EVALSHA` instead.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), redis_rwlock::Error> {
/// use std::time::Duration;
/// use redis_rwlock::{LockClient, redis};
///
/// // The application's own cluster configuration: TLS and an ACL user from the URL.
/// let cluster = redis::cluster::ClusterClientBuilder::new(["rediss://locker:secret@10.0.0.1:6379"]);
/// let client = LockClient::builder()
///     .cluster_client(cluster)
///     .response_timeout(Duration::from_secs(1))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct LockClientBuilder {
    target: Option<Target>,
    limits: Limits,
}

enum Target {
    ClusterNodes(Vec<String>),
    Url(String),
    Cluster(Box<ClusterClientBuilder>),
    Client(Box<Client>),
}

impl LockClientBuilder {
    pub(crate) fn new() -> Self {
        LockClientBuilder {
            target: None,
            limits: Limits::default(),
        }
    }

    /// Connect to a Redis Cluster through any of these nodes (`redis://` or
    /// `rediss://` URLs, with `user:password@` for an ACL user). Replaces any
    /// server given before.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_rwlock::Error> {
    /// let client = redis_rwlock::LockClient::builder()
    ///     .cluster_nodes(["rediss://locker:secret@10.0.0.1:6379"])
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster_nodes<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nodes = nodes.into_iter().map(|n| n.as_ref().to_owned()).collect();
        self.target = Some(Target::ClusterNodes(nodes));
        self
    }

    /// Connect to one server (not a cluster node) at `url`. Replaces any server given
    /// before.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_rwlock::Error> {
    /// let client = redis_rwlock::LockClient::builder()
    ///     .standalone_url("rediss://locker:secret@10.0.0.9:6379")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn standalone_url(mut self, url: impl Into<String>) -> Self {
        self.target = Some(Target::Url(url.into()));
        self
    }

    /// Connect to a Redis Cluster with your own redis-rs configuration: TLS
    /// certificates, credentials and everything else the builder carries are used
    /// as they are, except the limits of this builder and the protocol (RESP3),
    /// which the lock sets (see [What the lock needs](Self#what-the-lock-needs-from-a-client-of-yours)).
    /// Replaces any server given before.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use redis_rwlock::{LockClient, redis};
    /// use redis::cluster::ClusterClientBuilder;
    /// use redis::{ClientTlsConfig, TlsCertificates};
    ///
    /// // A private CA and a client certificate (mutual TLS); needs feature `tls-rustls`.
    /// let certs = TlsCertificates {
    ///     client_tls: Some(ClientTlsConfig {
    ///         client_cert: std::fs::read("client.crt")?,
    ///         client_key: std::fs::read("client.key")?,
    ///     }),
    ///     root_cert: Some(std::fs::read("ca.crt")?),
    /// };
    /// let cluster = ClusterClientBuilder::new(["rediss://10.0.0.1:6379"])
    ///     .username("locker")
    ///     .password("secret")
    ///     .certs(certs);
    /// let client = LockClient::builder().cluster_client(cluster).build().await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster_client(mut self, builder: ClusterClientBuilder) -> Self {
        self.target = Some(Target::Cluster(Box::new(builder)));
        self
    }

    /// Connect to one server with your own [`redis::Client`](https://docs.rs/redis/1/redis/struct.Client.html) (for example one made
    /// with `Client::build_with_tls`); the subscription connection is opened from
    /// its connection info with RESP3. Replaces any server given before.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use redis_rwlock::{LockClient, redis};
    ///
    /// let redis = redis::Client::open("rediss://locker:secret@10.0.0.9:6379")?;
    /// let client = LockClient::builder().client(redis).build().await?;
    /// # Ok(()) }
    /// ```
    pub fn client(mut self, client: Client) -> Self {
        self.target = Some(Target::Client(Box::new(client)));
        self
    }

    /// The longest a connection (or reconnection) attempt may take. Default 1 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_rwlock::Error> {
    /// use std::time::Duration;
    ///
    /// let client = redis_rwlock::LockClient::builder()
    ///     .cluster_nodes(["redis://127.0.0.1:7000"])
    ///     .connection_timeout(Duration::from_millis(500))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn connection_timeout(mut self, limit: Duration) -> Self {
        self.limits.connection = limit;
        self
    }

    /// The longest one request may wait for its reply. Default 2 s.
    ///
    /// It bounds how long a lost node can delay an acquire or a release; keep it
    /// well above any
    /// [`LockOptions::replica_timeout`](crate::LockOptions::replica_timeout) you use
    /// (a `WAIT` for replicas is part of one request).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_rwlock::Error> {
    /// use std::time::Duration;
    ///
    /// let client = redis_rwlock::LockClient::builder()
    ///     .standalone_url("redis://127.0.0.1:6379")
    ///     .response_timeout(Duration::from_secs(1))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn response_timeout(mut self, limit: Duration) -> Self {
        self.limits.response = limit;
        self
    }

    /// The longest a request may take in all, retries and redirections (MOVED,
    /// ASK, TRYAGAIN) included. Default 4 s; must not be shorter than the
    /// [`response_timeout`](Self::response_timeout).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_rwlock::Error> {
    /// use std::time::Duration;
    ///
    /// let client = redis_rwlock::LockClient::builder()
    ///     .cluster_nodes(["redis://127.0.0.1:7000"])
    ///     .overall_timeout(Duration::from_secs(8))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn overall_timeout(mut self, limit: Duration) -> Self {
        self.limits.overall = limit;
        self
    }

    /// Connects: opens the lock connection, checks the server with one `INFO
    /// server` (Redis 7.0 or newer, or a compatible server such as Valkey, of the
    /// right kind; skipped with a warning if an ACL denies `INFO`), then opens the
    /// subscription connection. With feature `tls-rustls`, installs rustls's ring
    /// crypto provider first unless the process already has one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] when no server was given, no cluster node URL, a URL
    /// is not a Redis URL the driver can use (checked before anything is sent), a
    /// limit is zero or the overall one shorter than the response one, the cluster
    /// client reads from replicas, the servers are of the other kind (a cluster node
    /// given as one server, or the reverse) or older than Redis 7.0 (the message
    /// names the server and its version); [`Error::Redis`] (doing
    /// [`Operation::Connect`]) when TLS or authentication fails, or no server answers
    /// in time.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future only abandons the connection attempt.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_rwlock::Error> {
    /// let client = redis_rwlock::LockClient::builder()
    ///     .cluster_nodes(["redis://127.0.0.1:7000"])
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<LockClient, Error> {
        self.connect()
            .await
            .map_err(|err| err.doing(None, Operation::Connect))
    }

    async fn connect(self) -> Result<LockClient, Error> {
        self.limits.check()?;
        #[cfg(feature = "tls-rustls")]
        crate::backend::redis::connection::install_crypto_provider();
        let limits = self.limits;
        let connected = match self.target {
            None => {
                return Err(Error::InvalidOptions(
                    "no server given: call cluster_nodes, standalone_url, cluster_client or \
                     client on the builder"
                        .into(),
                ));
            }
            Some(Target::ClusterNodes(nodes)) => {
                let Some(first) = nodes.first() else {
                    return Err(Error::InvalidOptions("no cluster node URL given".into()));
                };
                for (i, node) in nodes.iter().enumerate() {
                    check_url(
                        node,
                        &format!("cluster node URL {} of {}", i + 1, nodes.len()),
                    )?;
                }
                let first = first.clone();
                Connected::cluster(cluster_client_builder(&nodes), limits, Some(&first)).await?
            }
            Some(Target::Cluster(builder)) => Connected::cluster(*builder, limits, None).await?,
            Some(Target::Url(url)) => {
                check_url(&url, "the server URL")?;
                Connected::standalone(Client::open(url.as_str())?, limits).await?
            }
            Some(Target::Client(client)) => Connected::standalone(*client, limits).await?,
        };
        Ok(LockClient::from_parts(connected, limits))
    }
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the URLs or the client: they may hold a password.
        let target = match &self.target {
            None => "none",
            Some(Target::ClusterNodes(_)) => "cluster nodes",
            Some(Target::Url(_)) => "standalone url",
            Some(Target::Cluster(_)) => "cluster client",
            Some(Target::Client(_)) => "client",
        };
        f.debug_struct("LockClientBuilder")
            .field("target", &target)
            .field("connection_timeout", &self.limits.connection)
            .field("response_timeout", &self.limits.response)
            .field("overall_timeout", &self.limits.overall)
            .finish()
    }
}
