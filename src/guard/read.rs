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

    guard_core! {
        hold: share,
        acquire: "read",
        binding: "reader",
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

    /// Ends the hold.
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
