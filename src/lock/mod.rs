//! [`RwLock`]: a named read-write lock; cheap handle, all state in Redis.
//!
//! Beneath the handle: its options (`options.rs`), the requests it sends for its
//! guards and waiters (`requests.rs`: the one place that calls the backend
//! contract, `backend/mod.rs`, with the lock's options applied), waiting for the
//! lock (`waiting.rs`), the wake-ups waiters wait for (`wakeups.rs`, fed by
//! whichever backend the client has) and the reads the tasks of one process share
//! (`shared_reads/`). It calls the contract, the guards it makes (`guard/`) and its
//! client (`client/`), never a backend itself.

pub(crate) mod options;
pub(crate) mod requests;
pub(crate) mod shared_reads;
pub(crate) mod waiting;
pub(crate) mod wakeups;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use sync_wrapper::SyncFuture;

use crate::backend::check_lock_name;
use crate::backend::{Backend, Link, Target};
use crate::client::{LockClient, UserHandle};
use crate::error::Doing;
use crate::guard::lease::Lease;
use crate::lock::waiting::acquire;
use crate::metrics::{Acquiring, LockLabel, Mode};
use crate::protocol::Access;
use crate::protocol::state::LockState;
use crate::{
    Error, LockOptions, Operation, RwLockReadGuard, RwLockUpgradableReadGuard, RwLockWriteGuard,
};

/// A read-write lock shared by every process that names it.
///
/// Many readers hold it together, or one writer alone. Each hold is a lease kept in
/// Redis (10 s by default) that the guard renews in the background while it lives;
/// a process that dies without releasing loses its holds when their leases end.
///
/// # Priority policy
///
/// By default ([`Fairness::WriterPreferred`](crate::Fairness::WriterPreferred)) the lock is fair both ways, like
/// tokio's `RwLock`: waiters form one line in arrival order. A waiting writer
/// queues, and new readers wait behind it, so a refresher is never starved by a
/// stream of readers; readers that arrive while a writer holds or is queued wait in
/// line too, behind the writers queued before them and ahead of those that come
/// after, and the release they wait for lets all of them in at once (phase-fair),
/// so readers are never starved by a stream of writers either. A place in line
/// lapses soon after its waiter stops re-checking (within the write lease, kept
/// between 1.5 s and 3.3 s: a crashed waiter does not block the lock for long; a
/// cancelled one withdraws at once).
/// [`Fairness::ReaderPreferred`](crate::Fairness::ReaderPreferred) lets readers in whenever no writer holds (writers
/// may then wait without end), and [`read_recursive`](Self::read_recursive) takes one
/// such read hold for a task that already reads.
///
/// # Upgradable reads
///
/// [`upgradable_read`](Self::upgradable_read) takes a read hold that only one
/// holder at a time may have: plain readers go on beside it, writers wait, and it
/// can turn into the write hold with no writer in between
/// ([`RwLockUpgradableReadGuard::upgrade`]). Check a cache's age under it and refresh
/// only when stale: of several processes doing so, one refreshes per staleness
/// period. An upgradable acquire waits behind queued writers (writer preference); a
/// waiting upgrade keeps new readers out and goes before queued writers.
///
/// # Drop contract
///
/// [`RwLockReadGuard::release`]/[`RwLockWriteGuard::release`] end a hold and report
/// errors. Dropping a guard instead releases it in the background on the runtime it
/// was acquired on; if that fails, the hold ends when its lease does. A guard leaked
/// with [`std::mem::forget`] keeps renewing while the runtime runs (with
/// `auto_renew(false)` it simply expires).
///
/// The handle is cheap to clone and does no I/O until used.
///
/// # Examples
///
/// ```no_run
/// use redis_rwlock::{LockClient, RwLock};
///
/// # async fn run() -> Result<(), redis_rwlock::Error> {
/// let client = LockClient::cluster(["redis://127.0.0.1:7000"]).await?;
/// let lock: RwLock = client.rwlock("inventory");
/// let worker = lock.clone();
/// tokio::spawn(async move {
///     if let Ok(guard) = worker.read().await {
///         // ... read ...
///         let _ = guard.release().await;
///     }
/// });
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    inner: Arc<LockInner>,
    /// The `lock` label of this handle's metrics (see [`RwLock::with_metrics_name`]).
    metrics: LockLabel,
    /// The application's handle of the client; `None` in the crate's own copies
    /// ([`RwLock::internal`]).
    _handle: Option<Arc<UserHandle>>,
}

struct LockInner {
    /// The crate's own copy: it does not count as the application's handle.
    client: LockClient,
    name: String,
    options: LockOptions,
    /// The lock's keys and scripts, or why the lock is unusable.
    target: Result<Target, Unusable>,
}

/// Why every operation of a lock fails before any I/O.
enum Unusable {
    Options(String),
    CrossSlot { key: String, other: String },
}

impl From<Error> for Unusable {
    fn from(err: Error) -> Self {
        match err {
            Error::InvalidOptions(message) => Unusable::Options(message),
            Error::CrossSlot { key, other } => Unusable::CrossSlot { key, other },
            other => Unusable::Options(other.to_string()),
        }
    }
}

/// A hold the server granted, with its lease running.
pub(crate) struct Leased {
    pub(crate) lease: Lease,
    /// The fencing token (0 for reads).
    pub(crate) fence: u64,
    /// It waited for others first.
    pub(crate) waited: bool,
}

impl RwLock {
    /// A lock in the hash layout, `"{prefix}:{name}"`.
    pub(crate) fn new(client: LockClient, name: String, options: LockOptions) -> Self {
        let target = check_lock_name(&name)
            .and_then(|()| options.validate())
            .map(|()| {
                Target::hash(
                    &options.key_prefix,
                    &name,
                    options.original_timeouts_in_force(),
                )
            });
        Self::with_target(client, name, options, target)
    }

    /// A lock in the legacy two-key layout; named after its read key.
    pub(crate) fn legacy(
        client: LockClient,
        read_key: String,
        write_key: String,
        options: LockOptions,
    ) -> Self {
        let target = check_legacy_keys(&client, &read_key, &write_key)
            .and_then(|()| options.validate())
            .and_then(|()| match options.keep_reads {
                // A legacy lock's reads are never shared, so nothing would be kept.
                Some(_) => Err(Error::InvalidOptions(
                    "keep_reads needs shared reads, which a legacy two-key lock does not have"
                        .to_owned(),
                )),
                None => Ok(()),
            })
            .map(|()| Target::legacy(&read_key, &write_key, options.original_timeouts_in_force()));
        Self::with_target(client, read_key, options, target)
    }

    fn with_target(
        client: LockClient,
        name: String,
        options: LockOptions,
        target: Result<Target, Error>,
    ) -> Self {
        RwLock {
            _handle: client.handle(),
            inner: Arc::new(LockInner {
                client: client.internal(),
                name,
                options,
                target: target.map_err(Unusable::from),
            }),
            metrics: LockLabel::default(),
        }
    }

    /// Takes a read hold, waiting while a writer holds or (writer preference) is
    /// queued, at most [`LockOptions::wait_timeout`]. A reader that waits does so in
    /// line: behind the writers queued before it, ahead of those that come after;
    /// the release it waits for lets it in, with every reader that waits beside it.
    ///
    /// While this client already holds a plain read hold on the lock, the read
    /// joins it in the process, with no request: the tasks of one client share one
    /// read hold, which ends with its last guard. A writer that waits calls that
    /// hold back, and no read joins it afterwards (writer preference): such a read
    /// goes to the server and waits in line like any other. Not shared: locks with
    /// [`LockOptions::share_reads`] off, `auto_renew(false)` or `original_timeouts`,
    /// legacy locks, and handles whose options differ (see the README, "Reads that
    /// cost nothing").
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when the wait limit passes (naming the lock, the mode and
    /// the limit: `timed out after 1s waiting for the read lock on "inventory"`);
    /// [`Error::InvalidOptions`] for a bad name or option (before any I/O);
    /// [`Error::WrongType`] when the key holds another type; with
    /// [`LockOptions::min_replicas`], [`Error::NotReplicated`] when too few replicas
    /// acknowledged (the hold is released again); [`Error::Redis`] (naming the lock
    /// and [`Operation::Acquire`]) when Redis fails or cannot be reached in time.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future withdraws the attempt in the background; if Redis had
    /// already granted a hold whose reply was not read, that release removes it, and
    /// failing that the hold ends with its lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let guard = lock.read().await?;
    /// // ... read the shared resource ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(
        &self,
    ) -> impl Future<Output = Result<RwLockReadGuard, Error>> + Send + Sync + 'static {
        self.acquire_read(Access::Read, true)
    }

    /// Takes a read hold that does not wait behind queued writers, only while a
    /// writer holds (at most [`LockOptions::wait_timeout`]): for a task that already
    /// holds a read hold of this lock and reads again (re-entrant reads).
    ///
    /// With writer preference, a second [`read`](Self::read) by a task that holds a
    /// read hold waits behind a writer queued meanwhile, and that writer waits for
    /// the first hold: a deadlock until the wait limit (tokio's `RwLock` has the
    /// same trap). This call does not wait in line, so it cannot deadlock that way.
    /// The price: used by everyone, it would let readers overtake queued writers
    /// without end, so use it only for nested reads. The hold is independent of the
    /// first: its own guard, lease and release.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let outer = lock.read().await?;
    /// // ... deeper in the same task, which must not wait behind a queued writer:
    /// let inner = lock.read_recursive().await?;
    /// inner.release().await?;
    /// outer.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read_recursive(
        &self,
    ) -> impl Future<Output = Result<RwLockReadGuard, Error>> + Send + Sync + 'static {
        self.acquire_read(Access::RecursiveRead, true)
    }

    /// Takes the write hold, waiting for every holder to leave, at most
    /// [`LockOptions::wait_timeout`]. While it waits, it is queued: new readers and
    /// later writers wait behind it (with [`Fairness::WriterPreferred`](crate::Fairness::WriterPreferred)).
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read); the place in the queue is withdrawn too.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let guard = lock.write().await?;
    /// let token = guard.fencing_token(); // pass it to the resource you protect
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn write(
        &self,
    ) -> impl Future<Output = Result<RwLockWriteGuard, Error>> + Send + Sync + 'static {
        self.acquire_write(true)
    }

    /// Takes a read hold if that needs no waiting: one round trip, or none when it
    /// joins this client's read hold of the lock (as [`read`](Self::read) does).
    ///
    /// # Errors
    ///
    /// [`Error::WouldBlock`] when a writer holds or (writer preference) is queued;
    /// otherwise as [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// match lock.try_read().await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(redis_rwlock::Error::WouldBlock) => println!("busy"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_read(
        &self,
    ) -> impl Future<Output = Result<RwLockReadGuard, Error>> + Send + Sync + 'static {
        self.acquire_read(Access::Read, false)
    }

    /// Takes the write hold if that needs no waiting: one round trip.
    ///
    /// # Errors
    ///
    /// [`Error::WouldBlock`] when anyone holds, or another writer is first in line;
    /// otherwise as [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// if let Ok(guard) = lock.try_write().await {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_write(
        &self,
    ) -> impl Future<Output = Result<RwLockWriteGuard, Error>> + Send + Sync + 'static {
        self.acquire_write(false)
    }

    /// Takes the upgradable read hold: a read hold that only one holder at a time
    /// may have, and that keeps writers out, so it can later
    /// [`upgrade`](RwLockUpgradableReadGuard::upgrade) to the write hold with no
    /// other writer in between. Plain readers go on beside it. Waits while a writer
    /// holds, another upgradable reader holds, or (writer preference) a writer is
    /// queued, at most [`LockOptions::wait_timeout`].
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let guard = lock.upgradable_read().await?;
    /// // ... look at the cache; other readers go on ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn upgradable_read(
        &self,
    ) -> impl Future<Output = Result<RwLockUpgradableReadGuard, Error>> + Send + Sync + 'static
    {
        self.acquire_upgradable(true)
    }

    /// Takes the upgradable read hold if that needs no waiting: one round trip.
    ///
    /// # Errors
    ///
    /// [`Error::WouldBlock`] when a writer holds, another upgradable reader holds, or
    /// (writer preference) a writer is queued; otherwise as [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// match lock.try_upgradable_read().await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(redis_rwlock::Error::WouldBlock) => println!("another refresher is looking"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_upgradable_read(
        &self,
    ) -> impl Future<Output = Result<RwLockUpgradableReadGuard, Error>> + Send + Sync + 'static
    {
        self.acquire_upgradable(false)
    }

    /// Who holds the lock now, and until when, by the server's clock.
    ///
    /// Only reads (`FCALL_RO`, or `EVALSHA_RO` where functions are refused): it
    /// changes nothing on the server, so a user whose ACL allows only reads of the
    /// lock's keys (`%R~`) can run it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`], [`Error::WrongType`] as for [`read`](Self::read);
    /// [`Error::Redis`] (doing [`Operation::State`]) when Redis fails or cannot be
    /// reached in time.
    ///
    /// # Cancel safety
    ///
    /// Reads only; safe to drop.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let state = lock.state().await?;
    /// if let Some(writer) = &state.writer {
    ///     println!("written until {}", writer.until);
    /// }
    /// println!("{} readers", state.readers.len());
    /// # Ok(()) }
    /// ```
    pub async fn state(&self) -> Result<LockState, Error> {
        let raw = self
            .link()
            .state(self.target()?)
            .await
            .doing(self.name(), Operation::State)?;
        Ok(LockState::from_raw(raw))
    }

    /// An operator's break-glass: ends every hold on the lock, whoever owns it, and
    /// wakes the waiters. Queued writers keep their places and fencing tokens keep
    /// rising. The evicted holders find out at their next renewal (their guards
    /// report the lease lost, and never hold again); until then they may still act,
    /// so use this only when the holders are known to be gone or stuck. Readers
    /// that come afterwards hold like any others. If it ended read holds, writers
    /// are kept out for 3 s more: the tasks of an evicted client may join its read
    /// hold until they hear of the release (at once, by a message), and they stop
    /// within 2 s of that hold's last renewal even if the message is lost, so none of
    /// them reads beside the next writer. Meanwhile [`state`](Self::state) shows
    /// that fence as a reader no client is
    /// ([`Holder::is_forced_release_fence`](crate::Holder::is_forced_release_fence)).
    /// It deletes every reader's entry, so its work grows with the number of
    /// readers. Returns how many holds ended (the fence is not one).
    ///
    /// # Errors
    ///
    /// As [`state`](Self::state), the [`Error::Redis`] doing
    /// [`Operation::ForceRelease`].
    ///
    /// # Cancel safety
    ///
    /// One script, which the server runs whole: if the future is dropped mid-flight,
    /// either every hold it found was ended and the waiters woken, or nothing changed,
    /// and the count is lost. Calling it again is safe; it ends whatever holds exist
    /// by then (as does a request the driver sends again after a lost reply, which
    /// also ends holds granted in between).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let ended = lock.force_release().await?;
    /// println!("ended {ended} holds");
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self) -> Result<u64, Error> {
        let ended = self
            .link()
            .force_release(self.target()?)
            .await
            .doing(self.name(), Operation::ForceRelease)?;
        tracing::warn!(lock = self.name(), ended, "holds force-released");
        Ok(ended)
    }

    /// The lock's name (for a legacy lock, its read key).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) {
    /// assert_eq!(client.rwlock("inventory").name(), "inventory");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The Redis key that holds the lock's state: `"{prefix}:{name}"` (the name is
    /// the key's hash tag), or `"{prefix}:{tag}rest"` for a name that starts with a
    /// hash tag of its own (`{tag}rest`: locks whose names share the tag share a
    /// slot), or for a legacy two-key lock the companion hash
    /// `"{tag}:rwlock:legacy"` in its read key's slot. Keys of your own that carry
    /// the same hash tag live on the same node; the wake-up channel is this key
    /// followed by `:released`. No I/O.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] or [`Error::CrossSlot`] when the lock is unusable
    /// (a bad name, option or pair of legacy keys): it has no key, and every other
    /// operation fails the same way.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// assert_eq!(client.rwlock("inventory").key()?, "rwlock:{inventory}");
    /// assert_eq!(
    ///     client.rwlock("{order:42}:lines").key()?,
    ///     "rwlock:{order:42}:lines"
    /// );
    /// assert_eq!(
    ///     client.legacy_rwlock("{res}:read", "{res}:write").key()?,
    ///     "{res}:rwlock:legacy"
    /// );
    /// assert!(client.rwlock("no{braces}").key().is_err());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> Result<&str, Error> {
        Ok(self.target()?.key())
    }

    /// The options the lock was made with.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) {
    /// use redis_rwlock::LockOptions;
    /// let lock = client.rwlock_with("inventory", LockOptions::default().auto_renew(false));
    /// assert_eq!(lock.options(), &LockOptions::default().auto_renew(false));
    /// # }
    /// ```
    pub fn options(&self) -> &LockOptions {
        &self.inner.options
    }

    /// Labels this handle's metrics with the lock's name: every metric that it and
    /// the guards it gives record (acquisitions, waits, holds, lost leases, renewals,
    /// guards, waiters) gets the label `lock="<name>"`. Clones of the returned handle
    /// keep the label; the handle it was made from, and other handles of the same
    /// lock, do not. Without the feature `metrics`, it changes nothing.
    ///
    /// Off by default because each name is a series of its own in every one of
    /// those metrics: label a few long-lived locks (a cache, a scheduler), never
    /// locks named after users, requests or other unbounded sets, which would
    /// swell your metrics backend. Costs one small allocation per record.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// // redis_rwlock_acquisitions_total{lock="inventory",mode="read",outcome="granted"}
    /// let lock = client.rwlock("inventory").with_metrics_name();
    /// lock.read().await?.release().await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_metrics_name(mut self) -> Self {
        self.metrics = LockLabel::named(self.name());
        self
    }

    fn acquire_read(
        &self,
        access: Access,
        wait: bool,
    ) -> impl Future<Output = Result<RwLockReadGuard, Error>> + Send + Sync + 'static {
        let lock = self.clone();
        SyncFuture::new(async move {
            if access == Access::Read {
                let share = shared_reads::read(&lock, wait).await?;
                return Ok(RwLockReadGuard::shared(share));
            }
            let lease = lock.lease_for(access, wait).await?.lease;
            RwLockReadGuard::new(lease)
        })
    }

    fn acquire_upgradable(
        &self,
        wait: bool,
    ) -> impl Future<Output = Result<RwLockUpgradableReadGuard, Error>> + Send + Sync + 'static
    {
        let lock = self.clone();
        SyncFuture::new(async move {
            let lease = lock.lease_for(Access::UpgradableRead, wait).await?.lease;
            Ok(RwLockUpgradableReadGuard::new(lease))
        })
    }

    fn acquire_write(
        &self,
        wait: bool,
    ) -> impl Future<Output = Result<RwLockWriteGuard, Error>> + Send + Sync + 'static {
        let lock = self.clone();
        SyncFuture::new(async move {
            // Readers of this client that come from now on wait for this write.
            let writing = shared_reads::start_write(&lock);
            shared_reads::make_way(&lock).await;
            let leased = lock.lease_for(Access::Write, wait).await?;
            if let Some(writing) = &writing {
                writing.granted(leased.lease.hold());
            }
            Ok(RwLockWriteGuard::new(leased.lease, leased.fence).with_local_write(writing))
        })
    }

    /// Acquires a hold for `access` and starts its lease. The acquisition counts
    /// as a waiter until it returns or is dropped, and its outcome (and wait, when
    /// granted) is recorded.
    pub(crate) async fn lease_for(self, access: Access, wait: bool) -> Result<Leased, Error> {
        let acquiring = Acquiring::start(&self.metrics, Mode::of(access));
        let result = acquire(&self, access, wait)
            .await
            .doing(self.name(), access.operation())
            .map(|granted| {
                let (fence, waited) = (granted.fence, granted.waited);
                let lease = Lease::start(
                    self,
                    granted.token,
                    access,
                    fence,
                    granted.sent,
                    granted.lasts,
                );
                Leased {
                    lease,
                    fence,
                    waited,
                }
            });
        acquiring.finish(&result);
        result
    }

    // The accessors below serve the requests (src/lock/requests.rs), waiting and leases.

    /// Fails with [`Error::InvalidOptions`] for a bad name or option.
    pub(crate) fn check(&self) -> Result<(), Error> {
        self.target().map(|_| ())
    }

    pub(crate) fn target(&self) -> Result<&Target, Error> {
        self.inner
            .target
            .as_ref()
            .map_err(|unusable| match unusable {
                Unusable::Options(message) => Error::InvalidOptions(message.clone()),
                Unusable::CrossSlot { key, other } => Error::CrossSlot {
                    key: key.clone(),
                    other: other.clone(),
                },
            })
    }

    /// Where the lock's requests go (see `backend/mod.rs`).
    pub(crate) fn link(&self) -> &Link {
        &self.inner.client.inner.link
    }

    /// The client the lock was made by (the crate's own copy).
    pub(crate) fn client(&self) -> &LockClient {
        &self.inner.client
    }

    /// A copy for the crate's own use (a hold, a background task): it does not keep
    /// the client's kept read holds alive once the application's handles are gone.
    pub(crate) fn internal(&self) -> RwLock {
        RwLock {
            inner: self.inner.clone(),
            metrics: self.metrics.clone(),
            _handle: None,
        }
    }

    /// The `lock` label of this handle's metrics (none unless opted in).
    pub(crate) fn metrics_label(&self) -> &LockLabel {
        &self.metrics
    }
}

/// Legacy keys must be non-empty and distinct, and on a cluster share one slot.
fn check_legacy_keys(client: &LockClient, read_key: &str, write_key: &str) -> Result<(), Error> {
    if read_key.is_empty() || write_key.is_empty() {
        return Err(Error::InvalidOptions("a legacy lock key is empty".into()));
    }
    if read_key == write_key {
        return Err(Error::InvalidOptions(format!(
            "the read and write keys are the same key {read_key:?}"
        )));
    }
    if !client.inner.link.shares_slot(read_key, write_key) {
        return Err(Error::CrossSlot {
            key: write_key.to_owned(),
            other: read_key.to_owned(),
        });
    }
    Ok(())
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.inner.name)
            .field("options", &self.inner.options)
            .finish()
    }
}
