//! [`RwLockUpgradableReadGuard`]: a shared hold that can become the exclusive one.

use std::fmt;

use crate::guard::lease::Lease;
use crate::lock::shared_reads;
use crate::metrics::Mode;
use crate::protocol::state::LockMode;
use crate::{Error, RwLockReadGuard, RwLockWriteGuard};

/// An upgradable read hold on an [`RwLock`](crate::RwLock), renewed in the background
/// while it lives: it reads beside plain readers, but only one upgradable hold exists
/// at a time, and no writer enters while it lives. So it can look at the resource
/// and then [`upgrade`](Self::upgrade) to the write hold with no other writer in
/// between: of several processes that find a cache stale, only the one holding this
/// refreshes it, and the others find it fresh when they get their turn.
///
/// Release it with [`release`](Self::release); dropping it releases in the
/// background (see [the lock's drop contract](crate::RwLock#drop-contract)).
///
/// # Examples
///
/// ```no_run
/// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
/// # let stale = |_: &()| true;
/// let guard = lock.upgradable_read().await?; // readers go on meanwhile
/// if stale(&()) {
///     let writer = guard.upgrade().await?; // waits for the readers to leave
///     // ... refresh, e.g. with writer.fenced_write(..) ...
///     writer.release().await?;
/// } else {
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[must_use = "the hold is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct RwLockUpgradableReadGuard {
    lease: Lease,
}

impl RwLockUpgradableReadGuard {
    pub(crate) fn new(lease: Lease) -> Self {
        RwLockUpgradableReadGuard { lease }
    }

    guard_core! {
        hold: lease,
        acquire: "upgradable_read",
        binding: "guard",
        is_held_also: "Also false after a successful [`try_upgrade`](Self::try_upgrade), \
                       which moves the hold to the write guard.",
    }

    /// The mode of this hold: [`LockMode::Read`](crate::LockMode::Read). It is a read
    /// hold to everyone else, clients of the original design too.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let guard = lock.upgradable_read().await?;
    /// assert_eq!(guard.mode(), redis_rwlock::LockMode::Read);
    /// # Ok(()) }
    /// ```
    pub fn mode(&self) -> LockMode {
        LockMode::Read
    }

    /// Turns this hold into the write hold, with a new fencing token and no other
    /// writer in between: waits until every other reader has left, at most
    /// [`LockOptions::wait_timeout`](crate::LockOptions::wait_timeout). While it
    /// waits, new readers wait too (with
    /// [`Fairness::WriterPreferred`](crate::Fairness::WriterPreferred)), so a stream
    /// of readers cannot starve it; queued writers wait anyway. The last reader's
    /// release hands the write hold over: one wake-up, no polling.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the upgradable hold was already gone;
    /// [`Error::Timeout`] (naming the lock, [`Mode::Write`](crate::Mode::Write) and the
    /// wait limit) when the wait limit passed (the hold is then released);
    /// [`Error::Redis`] (doing [`Operation::Upgrade`](crate::Operation::Upgrade)) when
    /// Redis failed (the hold is then released in the background).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops this guard: its hold is released in the
    /// background, whether the upgrade was still waiting (readers are let in again
    /// at once) or had just been granted.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let guard = lock.upgradable_read().await?;
    /// let writer = guard.upgrade().await?;
    /// println!("refreshing with fencing token {}", writer.fencing_token());
    /// writer.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn upgrade(mut self) -> Result<RwLockWriteGuard, Error> {
        let acquiring = self.lease.acquiring(Mode::Upgrade);
        self.make_way().await;
        let result = match self.lease.upgrade(true).await {
            Ok((lease, fence)) => Ok(RwLockWriteGuard::new(lease, fence)),
            Err(err @ Error::Timeout { .. }) => {
                // Let the readers in now, not when the lease ends.
                let _ = self.lease.release().await;
                Err(err)
            }
            Err(err) => Err(err),
        };
        acquiring.finish(&result);
        result
    }

    /// Turns this hold into the write hold if no other reader holds: one round trip.
    /// On success the hold moves to the returned write guard and this guard is left
    /// empty ([`is_held`](Self::is_held) false; releasing or dropping it does
    /// nothing); on an error it keeps its hold, except as said below.
    ///
    /// # Errors
    ///
    /// [`Error::WouldBlock`] while other readers hold; [`Error::LeaseLost`] when the
    /// upgradable hold is gone; [`Error::Redis`] (doing
    /// [`Operation::Upgrade`](crate::Operation::Upgrade)) when Redis failed;
    /// [`Error::NotReplicated`] when too few replicas acknowledged (the hold was
    /// released).
    ///
    /// # Cancel safety
    ///
    /// If dropped mid-flight the upgrade may have been granted: this guard still
    /// owns the hold, in whichever mode, and releasing or dropping it ends it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// use redis_rwlock::Error;
    ///
    /// let mut guard = lock.upgradable_read().await?;
    /// match guard.try_upgrade().await {
    ///     Ok(writer) => writer.release().await?,
    ///     Err(Error::WouldBlock) => guard.release().await?, // readers are busy: later
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_upgrade(&mut self) -> Result<RwLockWriteGuard, Error> {
        let acquiring = self.lease.acquiring(Mode::Upgrade);
        self.make_way().await;
        let result = self.lease.upgrade(false).await;
        acquiring.finish(&result);
        let (lease, fence) = result?;
        Ok(RwLockWriteGuard::new(lease, fence))
    }

    /// Turns this hold into a plain read hold, in one step: the lease goes on, and
    /// another upgradable reader may now enter.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the hold was already gone; [`Error::Redis`] (doing
    /// [`Operation::Downgrade`](crate::Operation::Downgrade)) when Redis failed (the
    /// hold is then released in the background).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future releases the hold in the background, upgradable or not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// let guard = lock.upgradable_read().await?;
    /// // ... the value is fresh: no refresh needed, keep reading ...
    /// let reader = guard.downgrade().await?;
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(self) -> Result<RwLockReadGuard, Error> {
        self.lease.leave_upgradable().await?;
        RwLockReadGuard::new(self.lease)
    }

    /// Ends the hold, as [`RwLockReadGuard::release`](crate::RwLockReadGuard::release)
    /// does; another upgradable reader may then enter.
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
    /// with its lease at the latest.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run(lock: redis_rwlock::RwLock) -> Result<(), redis_rwlock::Error> {
    /// lock.upgradable_read().await?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), Error> {
        self.lease.release().await
    }
}

impl fmt::Debug for RwLockUpgradableReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLockUpgradableReadGuard")
            .field("token", &self.lease.token())
            .field("held", &self.is_held())
            .finish()
    }
}

impl RwLockUpgradableReadGuard {
    /// Before an upgrade, as before a write (`RwLock::write`): the client's idle kept
    /// read hold of the lock goes first, so the upgrade does not wait for it
    /// (`lock/shared_reads/`). Nothing when this guard no longer holds.
    async fn make_way(&self) {
        if let Some(hold) = self.lease.hold().filter(|hold| hold.is_held()) {
            shared_reads::make_way(&hold.lock).await;
        }
    }
}
