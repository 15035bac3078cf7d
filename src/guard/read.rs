//! [`RwLockReadGuard`]: a shared hold.

use std::fmt;

use crate::Error;
use crate::guard::lease::Lease;
use crate::lock::shared_reads::Share;
use crate::protocol::state::LockMode;

/// A read hold on an [`RwLock`](crate::RwLock), renewed in the background while it
/// lives. Release it with [`release`](Self::release); dropping it releases in the
/// background (see [the lock's drop contract](crate::RwLock#drop-contract)).
#[must_use = "the hold is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct RwLockReadGuard {
    share: Share,
}

impl RwLockReadGuard {
    /// A guard of a hold of its own.
    pub(crate) fn new(lease: Lease) -> Result<Self, Error> {
        Ok(RwLockReadGuard {
            share: Share::alone(lease)?,
        })
    }

    /// A guard of a share of the process's read hold (`lock/shared_reads/`).
    pub(crate) fn shared(share: Share) -> Self {
        RwLockReadGuard { share }
    }

    /// The name of the lock this guard holds.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// let reader = client.rwlock("inventory").read().await?;
    /// assert_eq!(reader.name(), "inventory");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.share.name()
    }

    /// The mode of this hold: [`LockMode::Read`](crate::LockMode::Read).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let reader = lock.read().await?;
    /// assert_eq!(reader.mode(), redis_rwlock::LockMode::Read);
    /// # Ok(()) }
    /// ```
    pub fn mode(&self) -> LockMode {
        LockMode::Read
    }

    /// The local deadline of the lease: [`is_held`](Self::is_held) turns false then
    /// unless a renewal moves it. It is when the request that granted or last renewed
    /// the hold was sent, plus the lease (cut to the original-design clients' timeout
    /// when [`LockOptions::original_timeouts`](crate::LockOptions::original_timeouts)
    /// is set), on this process's monotonic clock; Redis's deadline is never earlier.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let reader = lock.read().await?;
    /// let left = reader.deadline().saturating_duration_since(std::time::Instant::now());
    /// println!("held for at least {left:?} more");
    /// # Ok(()) }
    /// ```
    pub fn deadline(&self) -> std::time::Instant {
        self.share.deadline()
    }

    /// Renews the lease now, for a full lease from this call (what the background
    /// renewal does; with [`LockOptions::auto_renew`](crate::LockOptions::auto_renew)
    /// off, this is how a long task keeps its hold).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease was already lost, the hold is gone, or the
    /// local deadline passed before Redis answered (the guard then reports the lease
    /// lost); [`Error::Redis`] when this attempt failed and the deadline has not passed
    /// (the hold may still be renewed by a later call).
    ///
    /// # Cancel safety
    ///
    /// If dropped mid-flight the renewal may or may not have happened; the local
    /// deadline moves only on a reply.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(client: redis_rwlock::LockClient) -> Result<(), redis_rwlock::Error> {
    /// use redis_rwlock::LockOptions;
    ///
    /// let lock = client.rwlock_with("inventory", LockOptions::default().auto_renew(false));
    /// let reader = lock.read().await?;
    /// for batch in 0..10 {
    ///     // ... one batch of work, well within the lease ...
    ///     reader.extend().await?;
    /// }
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&self) -> Result<(), Error> {
        self.share.extend().await
    }

    /// False once the lease is known lost: a renewal found it gone, or Redis could
    /// not be reached before the lease's local deadline.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let guard = lock.read().await?;
    /// for item in 0..1000 {
    ///     if !guard.is_held() {
    ///         break; // the lease is gone: stop before doing harm
    ///     }
    ///     // ... work on item ...
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.share.is_held()
    }

    /// Resolves when the lease is lost (never, while renewals succeed). Use it to
    /// abandon work that must not outlive the hold.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop and to call again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let guard = lock.read().await?;
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lease lost, stopping"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.share.lost().await
    }

    /// Ends the hold.
    ///
    /// Returns `Ok(())` when the lock no longer holds this guard's token afterwards
    /// (also when it had already expired unnoticed, or a retried request did it).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the guard already knew its lease was gone (returned
    /// at once; whatever the lock may still keep of the hold is cleared in the
    /// background); [`Error::Redis`] when Redis could not be reached (the hold then ends with its
    /// lease).
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
    /// lock.read().await?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), Error> {
        self.share.release().await
    }
}

impl fmt::Debug for RwLockReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockReadGuard")
            .field("token", &Some(self.share.token()))
            .field("held", &self.is_held())
            .finish()
    }
}
