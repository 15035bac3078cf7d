//! [`RwLockReadGuard`]: a shared hold.

use std::fmt;

use crate::Error;
use crate::lease::Lease;

/// A read hold on an [`RwLock`](crate::RwLock), renewed in the background while it
/// lives. Release it with [`release`](Self::release); dropping it releases in the
/// background (see the lock's drop contract).
#[must_use = "the hold is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct RwLockReadGuard {
    lease: Lease,
}

impl RwLockReadGuard {
    pub(crate) fn new(lease: Lease) -> Self {
        RwLockReadGuard { lease }
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
        self.lease.is_held()
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
        self.lease.lost().await
    }

    /// Ends the hold.
    ///
    /// Returns `Ok(())` when the lock no longer holds this guard's token afterwards
    /// (also when it had already expired unnoticed, or a retried request did it).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the guard already knew its lease was gone;
    /// [`Error::Redis`] when Redis could not be reached (the hold then ends with its
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
        self.lease.release().await
    }
}

impl fmt::Debug for RwLockReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockReadGuard")
            .field("token", &self.lease.token())
            .field("held", &self.is_held())
            .finish()
    }
}
