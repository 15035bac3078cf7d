//! [`LockClient`]: the connections every lock of a process shares.
//!
//! Here too: how a client is built (`builder.rs`) and what it has in flight, for
//! its shutdown (`live.rs`). A client holds its store as the backend contract's
//! [`Link`] and [`Subscriber`](crate::backend::Subscriber) (`backend/mod.rs`); its
//! constructors are the one place a backend is chosen.

pub(crate) mod builder;
pub(crate) mod live;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{Instant, timeout_at};

use crate::backend::memory::MemoryStore;
use crate::backend::{Backend, Connected, Limits, Link};
use crate::client::builder::LockClientBuilder;
use crate::client::live::Live;
use crate::error::ErrorChain;
use crate::guard::lease::release_unconfirmed;
use crate::guard::renewals::Renewals;
use crate::lock::shared_reads::SharedReads;
use crate::lock::wakeups::Wakeups;
use crate::{Error, LockOptions, LockSet, Operation, RwLock};

/// A handle to a Redis Cluster or a single Redis server, from which locks are made.
///
/// Cheap to clone: clones share one multiplexed connection per node for lock
/// scripts and one more for wake-up subscriptions. Every request has explicit limits,
/// by default at most 2 s for a reply, 4 s in all with up to 3 retries, 1 s to
/// connect ([`cluster_client_builder`](crate::cluster_client_builder) gives
/// connections of your own the same); [`LockClient::builder`] changes them and takes
/// your own configured redis-rs client (TLS, ACL user, protocol settings).
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), redis_rwlock::Error> {
/// use redis_rwlock::LockClient;
///
/// let client = LockClient::cluster(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"]).await?;
/// let refresh = client.rwlock("catalog");
/// let serve = client.clone().rwlock("catalog"); // the same lock
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
    /// Counts the application's handles (clients, locks); `None` in the crate's own
    /// copies (holds, registrations, background tasks), which keep the connections
    /// but not the client's kept read holds (see [`UserHandle`]).
    handle: Option<Arc<UserHandle>>,
}

/// The application's handles of a client, counted: when the last one goes, the
/// client gives back the read holds it keeps idle ([`LockOptions::keep_reads`]),
/// which nothing else would end before their bound. Guards need no handle: a held
/// guard ends its own hold.
pub(crate) struct UserHandle(Weak<ClientInner>);

impl Drop for UserHandle {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.abandoned.store(true, Ordering::Relaxed);
            inner.shared_reads.abandon();
        }
    }
}

pub(crate) struct ClientInner {
    /// Where the lock's requests go: the backend the client was made with.
    pub(crate) link: Link,
    pub(crate) wakeups: Wakeups,
    /// The request limits, also for the lock's own retries of a release.
    pub(crate) limits: Limits,
    /// Live holds and pending acquires, for [`LockClient::shutdown`].
    pub(crate) live: Live,
    /// When each live hold renews.
    pub(crate) renewals: Renewals,
    /// The read holds this client's tasks share.
    pub(crate) shared_reads: SharedReads,
    /// The application dropped its last handle ([`UserHandle`]).
    abandoned: AtomicBool,
}

impl LockClient {
    /// Connects to a Redis Cluster through any of its nodes, with the default limits
    /// (shorthand for [`LockClient::builder`] with
    /// [`cluster_nodes`](LockClientBuilder::cluster_nodes)).
    ///
    /// `rediss://` URLs connect over TLS (feature `tls-rustls`), verified against the
    /// system's root certificates; `redis://user:password@host:port` logs in as an
    /// ACL user (the subscription connection too). For a private CA or a client
    /// certificate, give the builder a redis-rs client of your own.
    ///
    /// The cluster must run Redis 7.0 or newer, or a server compatible with it such as
    /// Valkey: one `INFO server` on a node checks the `redis_version` it reports. If
    /// an ACL denies `INFO`, the check is skipped with a warning.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] when no URL is given, a URL is not a Redis URL
    /// (`http://...`; checked before anything is sent), the nodes are not in cluster
    /// mode, or the server is older than Redis 7.0 (the message names the server and
    /// its version); [`Error::Redis`] (doing [`Operation::Connect`]) when TLS or
    /// authentication fails, or no node answers in time.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future only abandons the connection attempt.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_rwlock::Error> {
    /// let client = redis_rwlock::LockClient::cluster(["redis://127.0.0.1:7000"]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn cluster<I, S>(nodes: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().cluster_nodes(nodes).build().await
    }

    /// Connects to one Redis server (7.0 or newer, or a compatible server such as
    /// Valkey) that is not part of a cluster, with the default limits (shorthand for
    /// [`LockClient::builder`] with
    /// [`standalone_url`](LockClientBuilder::standalone_url)). `rediss://` and
    /// `user:password@` work as for [`cluster`](Self::cluster).
    ///
    /// One `INFO server` checks the `redis_version` the server reports and that it is
    /// not a cluster node. If an ACL denies `INFO`, the check is skipped with a
    /// warning.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] when the URL is not a Redis URL (`http://...`;
    /// checked before anything is sent), the server is a cluster node (or a
    /// sentinel) or older than Redis 7.0 (the message names the server and its
    /// version); [`Error::Redis`] (doing [`Operation::Connect`]) when TLS or
    /// authentication fails, or the server does not answer in time.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future only abandons the connection attempt.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_rwlock::Error> {
    /// let client = redis_rwlock::LockClient::standalone("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn standalone(url: impl AsRef<str>) -> Result<Self, Error> {
        Self::builder().standalone_url(url.as_ref()).build().await
    }

    /// A client whose locks live in `store`, in this process: no server, the same
    /// semantics (see [`MemoryStore`]). Clients on one store share its locks, as
    /// processes on one Redis do. For tests of code that takes locks: only this
    /// constructor differs from a client on Redis.
    ///
    /// Requests to the store have the default limits: one that it does not answer
    /// ([`MemoryStore::stop_answering`]) fails after 4 s of tokio's time.
    ///
    /// # Examples
    ///
    /// A lease lost in the middle of a request, on tokio's paused clock (the test
    /// takes milliseconds):
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), redis_rwlock::Error> {
    /// use std::time::Duration;
    /// use redis_rwlock::{LockClient, LockOptions, MemoryStore};
    ///
    /// let store = MemoryStore::new();
    /// let client = LockClient::in_memory(&store);
    /// let lock = client.rwlock_with(
    ///     "inventory",
    ///     LockOptions::default().write_lease(Duration::from_secs(10)),
    /// );
    /// let guard = lock.write().await?;
    /// store.stop_answering(Duration::from_secs(60)); // the server hangs
    /// tokio::time::timeout(Duration::from_secs(30), guard.lost())
    ///     .await
    ///     .expect("the lease is lost within a lease and a renewal");
    /// assert!(!guard.is_held());
    /// # Ok(()) }
    /// ```
    pub fn in_memory(store: &MemoryStore) -> Self {
        let limits = Limits::default();
        Self::from_parts(Connected::in_memory(store, limits), limits)
    }

    /// A [`LockClientBuilder`]: connects to servers given as URLs or as your own
    /// configured redis-rs client, with limits of your choice.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redis_rwlock::Error> {
    /// use std::time::Duration;
    ///
    /// let client = redis_rwlock::LockClient::builder()
    ///     .cluster_nodes(["rediss://locker:secret@10.0.0.1:6379"])
    ///     .response_timeout(Duration::from_secs(1))
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::new()
    }

    pub(crate) fn from_parts(connected: Connected, limits: Limits) -> Self {
        let inner = Arc::new(ClientInner {
            link: connected.link,
            wakeups: Wakeups::new(connected.subscriber, connected.pushes),
            limits,
            live: Live::new(),
            renewals: Renewals::new(),
            shared_reads: SharedReads::default(),
            abandoned: AtomicBool::new(false),
        });
        let handle = Some(Arc::new(UserHandle(Arc::downgrade(&inner))));
        LockClient { inner, handle }
    }

    /// A copy for the crate's own use, which does not count as the application's
    /// handle ([`UserHandle`]).
    pub(crate) fn internal(&self) -> LockClient {
        LockClient {
            inner: self.inner.clone(),
            handle: None,
        }
    }

    /// The application's handle, for a lock made from this client to carry.
    pub(crate) fn handle(&self) -> Option<Arc<UserHandle>> {
        self.handle.clone()
    }

    /// Whether the application dropped its last handle of the client.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.inner.abandoned.load(Ordering::Relaxed)
    }

    /// The lock called `name`, with default options. No I/O.
    ///
    /// The lock lives in the hash `rwlock:{name}`: the name is the key's hash tag, so
    /// keys of your own that carry the same tag (`cache:{name}`) share its slot. Any
    /// non-empty name without `{` or `}` of at most 1,024 bytes (UTF-8) works (spaces
    /// and Unicode included). A name may also start with a hash tag of its own,
    /// `{order:42}:lines`, and then lives at `rwlock:{order:42}:lines`, in one slot
    /// with every lock and key of that tag (what a [`LockSet`] takes in one
    /// request). An empty name, a longer one, or one with braces anywhere else (or
    /// a tag alone) makes every operation fail with [`Error::InvalidOptions`],
    /// before any I/O.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let lock = client.rwlock("inventory");
    /// let guard = lock.read().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        self.rwlock_with(name, LockOptions::default())
    }

    /// The lock called `name`, with `options`. No I/O; see [`rwlock`](Self::rwlock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// let lock = client.rwlock_with(
    ///     "inventory",
    ///     LockOptions::default().write_lease(Duration::from_secs(30)),
    /// );
    /// # Ok(()) }
    /// ```
    pub fn rwlock_with(&self, name: impl Into<String>, options: LockOptions) -> RwLock {
        RwLock::new(self.clone(), name.into(), options)
    }

    /// An empty [`LockSet`]: several locks taken at once, all or nothing, with the
    /// default options. Add members with [`LockSet::read`] and [`LockSet::write`].
    /// No I/O.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let held = client.lock_set().read("catalogue").write("prices").acquire().await?;
    /// held.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_set(&self) -> LockSet {
        self.lock_set_with(LockOptions::default())
    }

    /// An empty [`LockSet`] whose members all use `options` (their leases, fairness,
    /// prefix...); its [`LockOptions::wait_timeout`] bounds the whole acquire. No I/O.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// let options = LockOptions::default().wait_timeout(Duration::from_secs(2));
    /// let set = client.lock_set_with(options).read("sources").write("report");
    /// set.acquire().await?.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_set_with(&self, options: LockOptions) -> LockSet {
        LockSet::new(self.clone(), options)
    }
}

impl LockClient {
    /// Ends everything this client has in flight, for a clean exit (a redeploy):
    /// releases every live hold of its guards, withdraws every pending acquire
    /// (`read()`/`write()` return [`Error::Shutdown`]), stops all renewals, and
    /// returns when that is done or `within` has passed. Guards that outlive it report
    /// their lease lost; every later acquire through the client (or its clones and
    /// locks) returns [`Error::Shutdown`].
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when acquires were still pending at the deadline (naming
    /// one of them: its lock and mode, with `within` as `waited`);
    /// [`Error::Redis`] (the first one, naming the lock, doing
    /// [`Operation::Release`]) when a release failed or was not confirmed by the
    /// deadline: that hold then ends with its lease.
    ///
    /// # Cancel safety
    ///
    /// The client is shut down from the first poll on; releases still running when
    /// the future is dropped are abandoned, and those holds end with their leases.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// use std::time::Duration;
    ///
    /// // On SIGTERM: free every lock this process holds or waits for.
    /// client.shutdown(Duration::from_secs(5)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self, within: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + within;
        let live = &self.inner.live;
        let mut releases = JoinSet::new();
        for (lock, token, mode) in live.close() {
            releases.spawn(async move {
                let released = timeout_at(deadline, lock.release_token_until(&token, deadline))
                    .await
                    .unwrap_or_else(|_| Err(release_unconfirmed(within)));
                released.map_err(|err| err.doing(Some(lock.name()), Operation::Release(mode)))
            });
        }
        let mut result = Ok(());
        while let Some(done) = releases.join_next().await {
            let failed = match done {
                Ok(Ok(_)) => None,
                Ok(Err(err)) => Some(err),
                Err(_) => Some(release_unconfirmed(within)),
            };
            if let (Some(err), Ok(())) = (failed, &result) {
                tracing::warn!(error = %ErrorChain(&err), "shutdown: a release failed; that hold ends with its lease");
                result = Err(err);
            }
        }
        if timeout_at(deadline, live.no_pending()).await.is_err()
            && let Some((lock, mode)) = live.a_pending()
        {
            return Err(Error::Timeout {
                lock,
                mode,
                waited: within,
            });
        }
        result
    }
}

impl LockClient {
    /// A lock in the original design's two-key layout, with default options. No I/O.
    ///
    /// `read_key` exists while anyone reads and `write_key` while anyone writes, both
    /// expiring, as the original single-instance scripts expect: clients still running
    /// those scripts on the same keys and this lock exclude each other both ways. Our
    /// own holders are counted one by one in a companion hash tagged like `read_key`
    /// (`{tag}:rwlock:legacy`, in the same slot), so one reader leaving never ends
    /// another's hold, and only the owner's token releases or renews. Waiting,
    /// renewal, fencing and the guards work as for [`rwlock`](Self::rwlock).
    ///
    /// On a standalone server any two distinct keys work. On a cluster they must
    /// share a slot (give them one hash tag, `{res}:read` / `{res}:write`); otherwise
    /// every operation fails with [`Error::CrossSlot`] before anything is written.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let lock = client.legacy_rwlock("{res}:read", "{res}:write");
    /// let guard = lock.write().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn legacy_rwlock(
        &self,
        read_key: impl Into<String>,
        write_key: impl Into<String>,
    ) -> RwLock {
        self.legacy_rwlock_with(read_key, write_key, LockOptions::default())
    }

    /// A legacy two-key lock with `options` (`key_prefix` does not apply). No I/O;
    /// see [`legacy_rwlock`](Self::legacy_rwlock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) {
    /// use std::time::Duration;
    /// use redis_rwlock::LockOptions;
    ///
    /// // Old clients use a 1 s read and a 3 s write timeout on these keys.
    /// let lock = client.legacy_rwlock_with(
    ///     "{res}:read",
    ///     "{res}:write",
    ///     LockOptions::default().original_timeouts(Duration::from_secs(1), Duration::from_secs(3)),
    /// );
    /// # }
    /// ```
    pub fn legacy_rwlock_with(
        &self,
        read_key: impl Into<String>,
        write_key: impl Into<String>,
        options: LockOptions,
    ) -> RwLock {
        RwLock::legacy(self.clone(), read_key.into(), write_key.into(), options)
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.inner.link.is_cluster() {
            "cluster"
        } else {
            "standalone"
        };
        f.debug_struct("LockClient").field("kind", &kind).finish()
    }
}
