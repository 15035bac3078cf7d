//! [`RwLockWriteGuard`]: the exclusive hold.

use std::fmt;

use crate::guard::lease::Lease;
use crate::lock::shared_reads::LocalWrite;
use crate::protocol::state::LockMode;
use crate::{Error, FencedWrites, RwLock, RwLockReadGuard};

/// The write hold on an [`RwLock`](crate::RwLock), renewed in the background while it
/// lives. Release it with [`release`](Self::release); dropping it releases in the
/// background (see [the lock's drop contract](crate::RwLock#drop-contract)).
#[must_use = "the hold is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct RwLockWriteGuard {
    lease: Lease,
    fence: u64,
    /// This client's readers of the lock wait for the hold to end (after its
    /// release keeps a read in its place): src/lock/shared_reads/writes.rs.
    writing: Option<LocalWrite>,
}

impl RwLockWriteGuard {
    pub(crate) fn new(lease: Lease, fence: u64) -> Self {
        RwLockWriteGuard {
            lease,
            fence,
            writing: None,
        }
    }

    /// The guard of a write this client's readers wait for.
    pub(crate) fn with_local_write(mut self, writing: Option<LocalWrite>) -> Self {
        self.writing = writing;
        self
    }

    guard_core! {
        hold: lease,
        acquire: "write",
        binding: "writer",
    }

    /// The mode of this hold: [`LockMode::Write`](crate::LockMode::Write).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let writer = lock.write().await?;
    /// assert_eq!(writer.mode(), redis_rwlock::LockMode::Write);
    /// # Ok(()) }
    /// ```
    pub fn mode(&self) -> LockMode {
        LockMode::Write
    }

    /// This hold's fencing token: larger than every token issued before it for this
    /// lock, also across the lock key's expiry (as long as the server clock does not
    /// go back). Have the protected resource refuse writes carrying a smaller token
    /// than one it has seen, and a paused, expired writer can do no harm.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let first = lock.write().await?;
    /// let token = first.fencing_token();
    /// first.release().await?;
    /// let second = lock.write().await?;
    /// assert!(second.fencing_token() > token);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// Writes `writes` (keys sharing the lock's hash tag) only if this guard still
    /// holds the lock, in one atomic step on the lock's node: a writer whose lease
    /// ran out (paused, cut off) can never overwrite a newer holder's data.
    ///
    /// # Errors
    ///
    /// [`Error::CrossSlot`] for a key without the lock's hash tag and
    /// [`Error::InvalidOptions`] for the lock's own key or a zero expiry (both before
    /// any I/O); [`Error::LeaseLost`] when the hold is gone (nothing was written, and
    /// the guard now reports the lease lost); [`Error::WrongType`] or
    /// [`Error::Redis`] (doing [`Operation::FencedWrite`](crate::Operation::FencedWrite))
    /// when Redis refuses a write or cannot be reached; with
    /// [`LockOptions::min_replicas`](crate::LockOptions::min_replicas),
    /// [`Error::NotReplicated`] (doing `FencedWrite`, with the replica timeout as
    /// `waited`) when too few replicas acknowledged the writes within
    /// the replica timeout (they are applied on the master, and a failover could
    /// still lose them; the hold stays).
    ///
    /// # Cancel safety
    ///
    /// If dropped mid-flight the batch was applied entirely or not at all.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// use redis_rwlock::{Error, FencedWrites};
    ///
    /// let writer = lock.write().await?; // lock "inventory"
    /// match writer.fenced_write(FencedWrites::new().set("cache:{inventory}", "fresh")).await {
    ///     Ok(()) => writer.release().await?,
    ///     Err(Error::LeaseLost { .. }) => eprintln!("too late: a newer holder owns the cache"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fenced_write(&self, writes: FencedWrites) -> Result<(), Error> {
        self.lease.fenced_write(&writes).await
    }

    /// Turns this write hold into a read hold in one step: no other writer can enter
    /// in between, and waiting readers are woken.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the write hold was already gone; [`Error::Redis`]
    /// (doing [`Operation::Downgrade`](crate::Operation::Downgrade)) when Redis failed
    /// (the hold, whichever mode it is in, is then released in the background).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future releases the hold in the background, in either mode.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let writer = lock.write().await?;
    /// // ... rebuild the value ...
    /// let reader = writer.downgrade().await?;
    /// // ... keep reading what was just written; other readers join ...
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(self) -> Result<RwLockReadGuard, Error> {
        self.lease.downgrade().await.and_then(RwLockReadGuard::new)
    }

    /// Ends the hold. With [`LockOptions::keep_reads`](crate::LockOptions::keep_reads)
    /// the client keeps a read hold in its place (README, "Kept reads").
    ///
    /// Returns `Ok(())` when the lock no longer holds this guard's token afterwards
    /// (also when it had already expired unnoticed, or a retried request did it).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] (naming the lock and the mode) when the guard already knew
    /// its lease was gone (returned at once; whatever the lock may still keep of the
    /// hold is cleared in the background); [`Error::Redis`] (doing
    /// [`Operation::Release`](crate::Operation::Release)) when Redis could not be
    /// reached (the hold then ends with its lease).
    ///
    /// # Cancel safety
    ///
    /// If dropped mid-flight the release may or may not have happened; the hold ends
    /// with its lease at the latest (no renewal runs any more).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// lock.write().await?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), Error> {
        let RwLockWriteGuard { lease, writing, .. } = self;
        let keeps = lease.hold().is_some_and(|hold| {
            // Held: a lost hold is released (and reported) as it is.
            hold.is_held()
                && crate::lock::shared_reads::keeps_after_write(&hold.lock, writing.as_ref())
        });
        if keeps {
            // The readers waiting for this write join the read hold kept in its place.
            let lock = lease.hold().map(|hold| hold.lock.clone());
            let doing = crate::Operation::Release(crate::Mode::Write);
            return crate::lock::shared_reads::release_keeping(lease, writing)
                .await
                .map_err(|err| err.doing(lock.as_ref().map(RwLock::name), doing));
        }
        let released = lease.release().await;
        drop(writing);
        released
    }
}

impl fmt::Debug for RwLockWriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockWriteGuard")
            .field("token", &self.lease.token())
            .field("fence", &self.fence)
            .field("held", &self.is_held())
            .finish()
    }
}
